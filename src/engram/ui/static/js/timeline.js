// Timeline: a branch's commits (or every branch's) newest first, filtered, paged by cursor, with branches and tags
// drawn: their labels, and the commit graph (graph.js); each row with the item count after the commit and its change
// ("+2", "145 → 147") and chips for the namespaces and keys it touched ("+N more").
import { api, mainBranch, refsById, session } from "./api.js";
import { field, formValues, h, href, isoToLocal, link, localToIso, nsText, select, short, timeEl, toast } from "./dom.js";
import { drawRow, Graph, LANE } from "./graph.js";
import { refText } from "./refs.js";

/** Below this width (px) the layout is a phone's (app.css has the same breakpoint). */
const NARROW = 700;
const QUICK = [["1 hour ago", 1], ["1 day ago", 24], ["3 days ago", 72], ["1 week ago", 168]];

export async function render(out, params) {
  const branch = params.branch || mainBranch();
  const all = params.all === "1"; // every branch's commits together
  const ref = all ? branch : params.ref || branch;
  const filters = { namespace: params.ns, key: params.key, author: params.author, since: params.since, until: params.until };
  const from = { ref, branch, all_branches: all || undefined, ...filters, limit: params.limit || 50 };
  const page = await api("/v1/timeline", { query: { ...from, cursor: params.cursor } });
  out.append(h("h1", {}, "Timeline ", h("span", { class: "muted" }, `of ${all ? "all branches" : ref === branch ? branch : refText(ref)}`)));
  out.append(controls(params, filterForm(params, branch, all), timeControl(params, branch)));
  if (!all && params.ref && params.ref !== branch) {
    out.append(h("p", { class: "notice" }, `Showing history from ${params.ref} (as of ${params.asof || "that point"}). `,
      link("state", { at: params.ref }, "Open the memory at this point"), " · ",
      link("timeline", { branch }, "back to the head of " + branch)));
  }
  const refs = refsById();
  // The graph joins each commit to its parents; a namespace, key or author filter leaves parents out, so
  // filtered pages show each commit's kind only.
  const graph = filters.namespace || filters.key || filters.author ? null : new Graph();
  const body = h("tbody", {});
  const addRows = (commits) => body.append(...commits.map((c) => row(c, refs[c.id] || [], branch, graph)));
  addRows(page.commits);
  const table = h("table", { "aria-label": "Commits, newest first", class: "timeline" },
    h("thead", {}, h("tr", {}, h("th", { class: "graph" }, h("span", { class: "skip" }, graph ? "graph" : "kind")),
      h("th", {}, "When"), h("th", {}, "Message"), h("th", {}, "Author"), h("th", {}, "Items changed"),
      h("th", { title: filters.namespace ? `items under ${filters.namespace} after the commit` : "items after the commit" }, "Items"), h("th", {}, "Refs"),
      h("th", {}, "Commit"))),
    body);
  if (page.commits.length) out.append(table);
  else out.append(h("p", { class: "muted" }, page.cursor ? `No match in the ${page.scanned} commits looked at so far.` : "No commits match."));
  const pager = h("div", { class: "pager" });
  if (params.cursor) pager.append(link("timeline", { ...params, cursor: "" }, "First page"));
  const scanned = h("span", { class: "muted", "aria-live": "polite" }, `${page.scanned} commits looked at for this page`);
  if (page.cursor) {
    // "Older commits" appends the next page below this one (the graph's lanes go on); its href is that page alone.
    let cursor = page.cursor;
    const next = h("a", { href: href("timeline", { ...params, cursor }), "data-next": true, class: "button", id: "next-page" },
      page.commits.length ? "Older commits" : "Keep looking");
    next.addEventListener("click", async (event) => {
      if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || !page.commits.length) return;
      event.preventDefault();
      if (next.getAttribute("aria-disabled")) return;
      next.setAttribute("aria-disabled", "true");
      try {
        const more = await api("/v1/timeline", { query: { ...from, cursor } });
        addRows(more.commits);
        scanned.textContent = `${more.scanned} commits looked at for the last page · ${body.rows.length} commits shown`;
        if (more.cursor) {
          cursor = more.cursor;
          next.setAttribute("href", href("timeline", { ...params, cursor }));
        } else next.replaceWith(h("span", { class: "muted" }, "End of history."));
      } catch (error) {
        toast(error.message, "error");
      } finally {
        next.removeAttribute("aria-disabled");
      }
    });
    pager.append(next);
  } else pager.append(h("span", { class: "muted" }, "End of history."));
  pager.append(scanned);
  out.append(pager);
}

function row(c, refs, branch, graph) {
  const writer = c.metadata && c.metadata.writer;
  const merge = c.parents.length > 1;
  const kind = merge ? `merge of ${c.parents.length} commits` : c.parents.length ? "commit" : "first commit";
  const drawn = graph && graph.add(c);
  const cell = h("td", { class: drawn ? "graph lanes" : "graph", title: kind },
    drawn ? [drawRow(drawn), h("span", { class: "skip" }, kind)] : merge ? "◆" : "●");
  if (drawn) cell.style.width = `${drawn.width * LANE + 8}px`; // CSSOM: the page's CSP refuses style attributes
  return h("tr", { "data-row": true, "data-commit": c.id }, cell,
    h("td", { class: "nowrap" }, timeEl(c.time)),
    h("td", {}, h("a", { href: href("commit", { id: c.id }), "data-open": true }, c.message || "(no message)"),
      writer ? [" ", h("span", { class: "badge", title: `writer run ${writer.run} for ${writer.target}` }, `writer run ${writer.run}`)] : null,
      c.metadata && c.metadata.reverts ? [" ", h("span", { class: "badge" }, `reverts ${short(c.metadata.reverts)}`)] : null,
      touched(c)),
    h("td", {}, link("timeline", { branch, author: c.author }, c.author, { title: "only this author's commits" })),
    h("td", {}, `${c.changed}${c.changed_capped ? "+" : ""}`),
    h("td", { class: "nowrap", "data-items": c.items }, count(c)),
    h("td", {}, h("span", { class: "refs" }, refs.map((r) => h("span", { class: `ref ${r.kind}`, title: r.kind }, r.name)))),
    h("td", { class: "mono nowrap" }, link("state", { at: c.id }, short(c.id), { title: "the memory at this commit" })));
}

/** The item count after commit ``c`` and its change from the first parent: "+2" and "145 → 147". */
function count(c) {
  const delta = c.items_delta;
  const sign = delta > 0 ? `+${delta}` : delta < 0 ? `−${-delta}` : "±0";
  return [h("span", { class: `kind ${delta > 0 ? "kind-added" : delta < 0 ? "kind-removed" : ""}`, "data-delta": delta }, sign), " ",
    h("span", { class: "muted" }, delta ? `${c.items - delta} → ${c.items}` : `${c.items}`)];
}

/** Chips for the namespaces a commit touched (one changed item: its key), at most the server's few, "+N more". */
function touched(c) {
  if (!c.touched || !c.touched.length) return null;
  const chips = c.touched.map((t) => {
    const ns = nsText(t.namespace);
    return t.changed === 1
      ? link("blame", { ns, key: t.keys[0], ref: c.id }, `${ns} / ${t.keys[0]}`, { class: "chip", title: "this item's history up to the commit" })
      : link("state", { at: c.id, ns }, `${ns} ×${t.changed}`, { class: "chip", title: `${t.changed} items changed in ${ns}: ${t.keys.join(", ")}${t.changed > t.keys.length ? ", …" : ""}` });
  });
  const rest = c.touched_namespaces - c.touched.length;
  if (rest > 0 || c.changed_capped) {
    chips.push(link("commit", { id: c.id }, rest > 0 ? `+${rest} more` : "more", { class: "chip more", title: "every change of the commit" }));
  }
  return h("div", { class: "touched", "data-touched": c.touched_namespaces }, chips);
}

/** The filter and time-travel forms, folded into "Filters and time travel" on a narrow screen (a phone sees the
 * commits first) unless a filter or a point in time is set; always open on a wide one. */
function controls(params, ...forms) {
  const active = ["ns", "key", "author", "since", "until", "asof"].some((name) => params[name]) || params.all === "1";
  const wide = !window.matchMedia || !window.matchMedia(`(max-width: ${NARROW}px)`).matches;
  const summary = h("summary", {}, "Filters and time travel", active ? h("span", { class: "muted" }, " (set)") : "");
  return h("details", { class: "controls", id: "timeline-controls", open: wide || active }, summary, ...forms);
}

function filterForm(params, branch, all) {
  const names = Object.keys(session.branches).sort();
  const form = h("form", { class: "bar", role: "search", "aria-label": "Filter the timeline" },
    field("Branch", select("branch", names, branch)),
    field("All branches", h("input", { type: "checkbox", name: "all", value: "1", checked: all, id: "all-branches" })),
    field("Namespace prefix", h("input", { name: "ns", value: params.ns || "", placeholder: "users.alice", size: 18 })),
    field("Key", h("input", { name: "key", value: params.key || "", placeholder: "needs a namespace", size: 14 })),
    field("Author", h("input", { name: "author", value: params.author || "", size: 16 })),
    field("Since", h("input", { type: "datetime-local", name: "since", value: isoToLocal(params.since) })),
    field("Until", h("input", { type: "datetime-local", name: "until", value: isoToLocal(params.until) })),
    h("button", { type: "submit", class: "primary" }, "Filter"),
    link("timeline", { branch }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const v = formValues(form);
    window.location.hash = href("timeline", { branch: v.branch, all: v.all, ns: v.ns.trim(), key: v.key.trim(), author: v.author.trim(),
      since: localToIso(v.since), until: localToIso(v.until) });
  });
  return form;
}

/** "The memory as of <time>": a calendar, quick jumps and a slider over the last 30 days. */
function timeControl(params, branch) {
  const input = h("input", { type: "datetime-local", name: "asof", value: isoToLocal(params.asof), id: "asof" });
  const slider = h("input", { type: "range", min: -720, max: 0, step: 1, value: params.asof ? -Math.round((Date.now() - new Date(params.asof)) / 3.6e6) : 0,
    "aria-label": "Hours ago (last 30 days)", id: "asof-slider" });
  const shown = h("output", { for: "asof-slider", class: "muted" });
  const showSlider = () => { shown.textContent = slider.value === "0" ? "now" : `${-slider.value} h ago`; };
  showSlider();
  slider.addEventListener("input", () => { showSlider(); input.value = isoToLocal(new Date(Date.now() + slider.value * 3.6e6).toISOString()); });
  slider.addEventListener("change", () => jump(branch, new Date(Date.now() + slider.value * 3.6e6).toISOString()));
  const form = h("form", { class: "bar", "aria-label": "Jump to a time" },
    field("The memory as of", input), h("button", { type: "submit" }, "Go"),
    QUICK.map(([label, hours]) => h("button", { type: "button", class: "small",
      onclick: () => jump(branch, new Date(Date.now() - hours * 3.6e6).toISOString()) }, label)),
    field("Slide back", slider), shown);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (input.value) jump(branch, localToIso(input.value));
  });
  return form;
}

/** Show the history as of ``iso``: the commit the branch pointed at then, and everything before it. */
export async function jump(branch, iso) {
  const at = `${branch}@{${iso}}`;
  try {
    const page = await api("/v1/timeline", { query: { ref: at, branch, limit: 1 } });
    const id = page.commits.length ? page.commits[0].id : at;
    window.location.hash = href("timeline", { branch, ref: id, asof: iso });
  } catch (error) {
    toast(error.message, "error");
  }
}
