// Search then and now: search at the point being viewed (hybrid, filters, profile) with explain scores, and
// one click to run the same query at head beside it.
import { api, mainBranch } from "./api.js";
import { errorBox, field, formValues, h, href, link, nsText, preview, select } from "./dom.js";

const MODES = ["hybrid", "keyword", "semantic"];
const PROFILES = ["similarity", "balanced", "recent", "quality"];

export async function render(out, params) {
  const head = mainBranch();
  const at = params.at || head;
  out.append(h("h1", {}, "Search ", h("span", { class: "muted" }, `at ${at}`)));
  const form = h("form", { class: "bar", role: "search", "aria-label": "Search" },
    field("Query", h("input", { name: "q", value: params.q || "", size: 30, id: "search-query", autofocus: true })),
    field("At (ref or branch@{time})", h("input", { name: "at", value: at, size: 28 })),
    field("Namespace prefix", h("input", { name: "ns", value: params.ns || "", size: 16 })),
    field("Filter (JSON)", h("input", { name: "filter", value: params.filter || "", size: 24, placeholder: '{"kind": "error"}' })),
    field("Mode", select("mode", MODES, params.mode || "hybrid")),
    field("Profile", select("profile", PROFILES, params.profile || "similarity")),
    h("button", { type: "submit", class: "primary" }, "Search"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const v = formValues(form);
    window.location.hash = href("search", { q: v.q.trim(), at: v.at.trim(), ns: v.ns.trim(), filter: v.filter.trim(), mode: v.mode, profile: v.profile });
  });
  out.append(form);
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
  const body = { query: params.q || undefined, namespace_prefix: params.ns ? params.ns.split(".") : [], filter, limit: 20,
    mode: params.mode || "hybrid", profile: params.profile || "similarity", explain: true };
  const then = await api("/v1/search", { method: "POST", body: { ...body, at } });
  const compare = params.compare === "1";
  const now = compare ? await api("/v1/search", { method: "POST", body }) : null;
  out.append(h("div", { class: "actions" }, compare
    ? link("search", { ...params, compare: "" }, "Hide head", { class: "button" })
    : link("search", { ...params, compare: "1" }, `Compare with head (${head})`, { class: "button", id: "compare-head" })));
  const thenBox = results(then, `Then: at ${at}`, now, "then", at);
  out.append(compare ? h("div", { class: "sides" }, thenBox, results(now, `Now: at head (${head})`, then, "now", head)) : thenBox);
}

const SIGNALS = ["similarity", "keyword", "semantic", "confidence", "recency", "bm25", "cosine"];

/** The signals behind a score: the main ones inline, everything the server explained on demand. */
function explain(signals) {
  const inline = SIGNALS.filter((k) => typeof signals[k] === "number").map((k) => `${k} ${signals[k].toFixed(3)}`).join(" · ");
  return h("details", { class: "score muted" }, h("summary", {}, inline || "explain"),
    h("pre", { class: "json" }, Object.entries(signals).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n")));
}

function results(found, title, other, id, at) {
  const elsewhere = other ? new Map(other.items.map((it) => [`${nsText(it.namespace)}/${it.key}`, it])) : null;
  const box = h("section", { "aria-label": title, id: `results-${id}` }, h("h2", {}, title),
    h("p", { class: "muted" }, `${found.items.length} results · mode ${found.mode}${found.degraded ? " (degraded: " + found.degraded + ")" : ""}`));
  const list = h("ol", {});
  for (const it of found.items) {
    const ns = nsText(it.namespace);
    const twin = elsewhere && elsewhere.get(`${ns}/${it.key}`);
    const changed = elsewhere && (!twin || JSON.stringify(twin.value) !== JSON.stringify(it.value));
    list.append(h("li", { "data-row": true, class: "msg" },
      h("div", { class: "head" }, h("a", { href: href("state", { at, ns, key: it.key }), "data-open": true }, `${ns} / ${it.key}`),
        h("span", { class: "score", title: "score" }, `score ${it.score === null || it.score === undefined ? "—" : it.score.toFixed(4)}`),
        changed ? h("span", { class: "badge" }, twin ? "differs" : "only here") : null),
      h("div", {}, preview(it.value, 200)),
      it.explain ? explain(it.explain) : null));
  }
  box.append(list);
  return box;
}
