// Search then and now: search at the point being viewed (hybrid, filters, profile) with explain scores, paged
// ("More results"), and one click to run the same query at head beside it. A badge says what is true of each
// result at the other point, checked by reading the shown items there (one lookup per side): "only here" means
// the item does not exist at the other point, not that it ranked lower there. ``source=`` lists the items
// that cite one source instead (a bounded scan).
import { api, mainBranch } from "./api.js";
import { errorBox, field, formValues, h, href, link, nsText, preview, select } from "./dom.js";
import { refInput, refLabel } from "./refs.js";

const MODES = ["hybrid", "keyword", "semantic"];
const PROFILES = ["similarity", "balanced", "recent", "quality"];
const PAGE = 20;

export async function render(out, params) {
  const head = mainBranch();
  const at = params.at || head;
  out.append(h("h1", {}, "Search ", h("span", { class: "muted" }, "at ", refLabel(at))));
  const form = h("form", { class: "bar", role: "search", "aria-label": "Search" },
    field("Query", h("input", { name: "q", value: params.q || "", size: 30, id: "search-query", autofocus: true })),
    field("At (ref or branch@{time})", refInput({ name: "at", value: at, size: 28 })),
    field("Namespace prefix", h("input", { name: "ns", value: params.ns || "", size: 16 })),
    field("Filter (JSON)", h("input", { name: "filter", value: params.filter || "", size: 24, placeholder: '{"kind": "error"}' })),
    field("Mode", select("mode", MODES, params.mode || "hybrid")),
    field("Profile", select("profile", PROFILES, params.profile || "similarity")),
    h("button", { type: "submit", class: "primary" }, "Search"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const v = formValues(form);
    window.location.hash = href("search", { q: v.q.trim(), at: v.at.trim(), ns: v.ns.trim(), filter: v.filter.trim(),
      mode: v.mode, profile: v.profile, compare: params.compare });
  });
  out.append(form);
  if (params.source) {
    await bySource(out, params, at);
    return;
  }
  if (!params.q && !params.filter && !params.ns) {
    out.append(h("p", { class: "muted" }, "Type a query: it runs on the memory as it was at the point above."));
    return;
  }
  let filter;
  try {
    filter = params.filter ? JSON.parse(params.filter) : undefined;
  } catch (error) {
    out.append(errorBox(`The filter is not JSON: ${error.message}`));
    return;
  }
  const offset = Math.max(0, Number(params.offset) || 0);
  const body = { query: params.q || undefined, namespace_prefix: params.ns ? params.ns.split(".") : [], filter, limit: PAGE,
    offset, mode: params.mode || "hybrid", profile: params.profile || "similarity", explain: true };
  const compare = params.compare === "1";
  const [then, now] = await Promise.all([api("/v1/search", { method: "POST", body: { ...body, at } }),
    compare ? api("/v1/search", { method: "POST", body }) : null]);
  for (const found of [then, now]) if (found) found.offset = offset;
  const [thenThere, nowThere] = compare ? await Promise.all([elsewhere(then, now, head), elsewhere(now, then, at)]) : [null, null];
  out.append(h("div", { class: "actions" }, compare
    ? link("search", { ...params, compare: "" }, "Hide head", { class: "button" })
    : link("search", { ...params, compare: "1" }, `Compare with head (${head})`, { class: "button", id: "compare-head" })));
  const thenBox = results(then, h("span", {}, "Then: at ", refLabel(at)), thenThere, "then", at, head);
  out.append(compare ? h("div", { class: "sides" }, thenBox, results(now, `Now: at head (${head})`, nowThere, "now", head, at)) : thenBox);
  const pager = h("div", { class: "pager" });
  if (offset) pager.append(link("search", { ...params, offset: Math.max(0, offset - PAGE) || "" }, "Previous results"));
  if (then.has_more || (now && now.has_more)) {
    pager.append(h("a", { href: href("search", { ...params, offset: offset + PAGE }), "data-next": true, id: "more-results" }, "More results"));
  }
  out.append(pager);
}

/** What each item of ``found`` is at the other point: its twin in ``other`` (the other side's results), else
 * read there (one lookup of the items not among them): {"ns/key": item or null}. */
async function elsewhere(found, other, point) {
  const there = new Map(other.items.map((it) => [`${nsText(it.namespace)}/${it.key}`, it]));
  const missing = found.items.filter((it) => !there.has(`${nsText(it.namespace)}/${it.key}`));
  if (missing.length) {
    const read = await api("/v1/items/lookup", { method: "POST",
      body: { at: point, items: missing.map((it) => ({ namespace: it.namespace, key: it.key })) } });
    missing.forEach((it, i) => there.set(`${nsText(it.namespace)}/${it.key}`, read.items[i]));
  }
  return there;
}

/** The items citing source ``params.source`` at ``at`` (under the namespace prefix), from a bounded scan. */
async function bySource(out, params, at) {
  const found = await api("/v1/sources/items", { query: { source: params.source, at, prefix: params.ns, limit: 100 } });
  const box = h("section", { "aria-label": "Items from this source", id: "source-items" },
    h("h2", {}, "Items citing source ", h("code", {}, params.source)),
    h("p", { class: "muted" }, `${found.items.length} item${found.items.length === 1 ? "" : "s"}`,
      found.complete ? ` (all ${found.scanned} items scanned)` : ` among the first ${found.scanned} items scanned: narrow the namespace prefix to see more`));
  box.append(h("ol", {}, found.items.map((it) => h("li", { "data-row": true, class: "msg" },
    h("div", { class: "head" }, h("a", { href: href("state", { at, ns: nsText(it.namespace), key: it.key }), "data-open": true },
      `${nsText(it.namespace)} / ${it.key}`), it.author ? h("span", { class: "muted" }, it.author) : null),
    h("div", {}, preview(it.value, 200))))));
  out.append(box);
}

const SIGNALS = ["similarity", "keyword", "semantic", "confidence", "recency", "bm25", "cosine"];

/** The signals behind a score: the main ones inline, everything the server explained on demand. */
function explain(signals) {
  const inline = SIGNALS.filter((k) => typeof signals[k] === "number").map((k) => `${k} ${signals[k].toFixed(3)}`).join(" · ");
  return h("details", { class: "score muted" }, h("summary", {}, inline || "explain"),
    h("pre", { class: "json" }, Object.entries(signals).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n")));
}

function results(found, title, there, id, at, otherPoint) {
  const first = found.items.length ? (Number(found.offset) || 0) : 0;
  const box = h("section", { "aria-label": typeof title === "string" ? title : title.textContent, id: `results-${id}` }, h("h2", {}, title),
    h("p", { class: "muted count" }, total(found), ` · mode ${found.mode}${found.degraded ? " (degraded: " + found.degraded + ")" : ""}`));
  const list = h("ol", { start: first + 1 });
  for (const it of found.items) {
    const ns = nsText(it.namespace);
    list.append(h("li", { "data-row": true, class: "msg", "data-item": `${ns}/${it.key}` },
      h("div", { class: "head" }, h("a", { href: href("state", { at, ns, key: it.key }), "data-open": true }, `${ns} / ${it.key}`),
        h("span", { class: "score", title: "score" }, `score ${it.score === null || it.score === undefined ? "—" : it.score.toFixed(4)}`),
        there ? badge(it, there.get(`${ns}/${it.key}`), otherPoint) : null),
      h("div", {}, preview(it.value, 200)),
      it.explain ? explain(it.explain) : null));
  }
  box.append(list);
  return box;
}

/** "Results 21–40 of 57" when the last page is known, else "of more than 40". */
function total(found) {
  const from = found.offset || 0;
  const n = found.items.length;
  if (!n) return from ? `No results after the first ${from}` : "No results";
  const range = `Results ${from + 1}–${from + n}`;
  return found.has_more ? `${range} of more than ${from + n}` : `${range} of ${from + n}`;
}

/** The badge of one result: what the item is at the other point (read there, not guessed from its rank). */
function badge(it, twin, otherPoint) {
  if (twin === null || twin === undefined) {
    return h("span", { class: "badge", "data-badge": "only-here", title: `the item does not exist at ${otherPoint}` }, "only here");
  }
  if (JSON.stringify(twin.value) !== JSON.stringify(it.value)) {
    return h("span", { class: "badge", "data-badge": "differs", title: `its value at ${otherPoint} differs` }, "differs");
  }
  return null;
}
