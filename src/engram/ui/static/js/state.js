// State at a point: namespaces and items as of any commit, tag, branch or time; one item's value, metadata,
// provenance (author, sources, the commit and writer run that made it) and "newer versions exist"; item counts (the
// total, each namespace's in the tree, the listed prefix's) from the counts the tree keeps, never by listing items.
import { api, canWrite, mainBranch } from "./api.js";
import { createRef } from "./commit.js";
import { natural } from "./diff.js";
import { refInput, refLabel } from "./refs.js";
import { runLink, sourceList } from "./sources.js";
import { editActions } from "./edit.js";
import { errorBox, field, h, href, isoToLocal, jsonBlock, link, localToIso, nsText, preview, short, timeEl, writeButton } from "./dom.js";

const ITEMS = 50;

export async function render(out, params) {
  const head = mainBranch();
  const at = params.at || head;
  const point = (await api("/v1/timeline", { query: { ref: at, limit: 1 } })).commits[0];
  out.append(h("h1", {}, "State ", h("span", { class: "muted" }, "at ", refLabel(at))));
  out.append(pointForm(params, at));
  const result = h("div", { "aria-live": "polite" });
  out.append(h("p", { class: "point" }, "Commit ", link("commit", { id: point.id }, short(point.id), { class: "mono" }),
    ` “${point.message}” by ${point.author}, `, timeEl(point.time)),
  h("div", { class: "actions" },
    link("diff", { old: point.id, new: head, ns: params.ns }, "Diff with head", { class: "button" }),
    link("search", { at }, "Search here", { class: "button" }),
    link("timeline", { ref: point.id }, "History up to here", { class: "button" }),
    writeButton("Branch from here…", () => createRef("branch", point.id, result), { id: "branch-here" }),
    writeButton("Tag here…", () => createRef("tag", point.id, result))), result);
  const [listed, under] = await Promise.all([api("/v1/namespaces", { query: { at, limit: NAMESPACES, counts: true } }),
    params.ns && !params.key ? api("/v1/namespaces", { query: { at, prefix: params.ns, limit: 0, counts: true } }) : null]);
  const { namespaces, counts, total } = listed;
  const more = namespaces.length >= NAMESPACES; // the list stops there: a namespace not listed counts at least
  out.querySelector("p.point").append(" · ", h("strong", { id: "item-count", "data-count": total }, plural(total, "item")), " at this point");
  const side = h("nav", { class: "tree", "aria-label": "Namespaces" },
    h("h2", {}, `Namespaces (${namespaces.length}${more ? "+" : ""})`), tree(namespaces, counts, more, at, params.ns));
  const body = h("section", { "aria-label": params.key ? "Item" : "Items" });
  out.append(h("div", { class: "cols" }, side, body));
  if (params.key && params.ns) await item(body, params, at, point, head);
  else await items(body, params, at, under ? under.total : total);
}

const NAMESPACES = 1000;
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

function pointForm(params, at) {
  const ref = refInput({ name: "at", value: at, size: 36, "aria-describedby": "at-help" });
  const when = h("input", { type: "datetime-local", name: "when", value: isoToLocal(params.asof) });
  const form = h("form", { class: "bar", "aria-label": "Point in history" },
    field("Ref: branch, tag, commit, HEAD~n, main@{time}", ref), field("…or as of a time", when),
    h("button", { type: "submit", class: "primary" }, "Open"),
    h("span", { id: "at-help", class: "muted" }, "The memory exactly as it was at that point."));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const iso = localToIso(when.value);
    const target = iso && when.value !== isoToLocal(params.asof) ? `${mainBranch()}@{${iso}}` : ref.value.trim();
    window.location.hash = href("state", { at: target, asof: iso, ns: params.ns, key: params.key });
  });
  return form;
}

/** Namespaces as a nested list, each a link to its items at ``at`` with how many items it holds (its
 * sub-namespaces' included): a listed namespace's count is the server's, another's the sum of its children's. */
function tree(namespaces, counts, more, at, current) {
  const root = { children: {} };
  namespaces.forEach((labels, i) => {
    let node = root;
    for (const label of labels) node = node.children[label] ||= { children: {} };
    node.count = counts[i];
  });
  const total = (node) => node.count ?? Object.values(node.children).reduce((sum, child) => sum + total(child), 0);
  const build = (node, prefix) => h("ul", {}, Object.keys(node.children).sort(natural).map((label) => {
    const path = prefix ? `${prefix}.${label}` : label;
    const child = node.children[label];
    const n = total(child);
    const atLeast = more && child.count === undefined;
    return h("li", {}, h("a", { href: href("state", { at, ns: path }), "aria-current": path === current ? "true" : null }, label),
      h("span", { class: "muted count", "data-count": n, title: `${atLeast ? "at least " : ""}${plural(n, "item")}` }, ` ${n}${atLeast ? "+" : ""}`),
      Object.keys(child.children).length ? build(child, path) : null);
  }));
  return build(root, "");
}

async function items(body, params, at, total) {
  const offset = Number(params.offset || 0);
  const prefix = params.ns ? params.ns.split(".") : [];
  const found = await api("/v1/search", { method: "POST", body: { namespace_prefix: prefix, limit: ITEMS + 1, offset, at } });
  const rows = found.items.slice(0, ITEMS);
  body.append(h("h2", {}, params.ns ? `Items under ${params.ns}` : "Newest items", h("span", { class: "muted", id: "items-range" }, ` (${offset + 1}–${offset + rows.length} of ${total})`)));
  body.append(h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Item"), h("th", {}, "Value"), h("th", {}, "Updated"))),
    h("tbody", {}, rows.map((it) => h("tr", { "data-row": true },
      h("td", {}, h("a", { href: href("state", { at, ns: nsText(it.namespace), key: it.key }), "data-open": true }, `${nsText(it.namespace)} / ${it.key}`)),
      h("td", {}, preview(it.value)), h("td", { class: "nowrap" }, timeEl(it.updated_at)))))));
  const pager = h("div", { class: "pager" });
  if (offset) pager.append(link("state", { ...params, offset: Math.max(0, offset - ITEMS) }, "Previous"));
  if (found.items.length > ITEMS) pager.append(h("a", { href: href("state", { ...params, offset: offset + ITEMS }), "data-next": true }, "Next items"));
  body.append(pager);
}

async function item(body, params, at, point, head) {
  const query = { namespace: params.ns, key: params.key };
  let found;
  try {
    found = await api("/v1/items", { query: { ...query, at } });
  } catch (error) {
    body.append(errorBox(error), link("blame", { ns: params.ns, key: params.key }, "Its history"));
    return;
  }
  const [then, now] = await Promise.all([
    api("/v1/history", { query: { ...query, ref: at } }), api("/v1/history", { query: { ...query, ref: head } })]);
  const made = then.versions[0] && then.versions[0].commit;
  const index = made ? now.versions.findIndex((v) => v.commit.id === made.id) : -1;
  const newer = index > 0 ? now.versions.slice(0, index) : index < 0 ? now.versions : [];
  body.append(h("h2", { id: "item-title" }, `${params.ns} / ${params.key}`));
  if (newer.length) {
    const latest = newer[0];
    body.append(h("div", { class: "notice", id: "newer", role: "note" },
      `Newer versions exist: ${newer.length} newer at ${head}, the latest by ${latest.commit.author} `, timeEl(latest.commit.time),
      latest.item ? "" : " (deleted)", ". ",
      link("state", { at: head, ns: params.ns, key: params.key }, "View at head"), " · ",
      link("diff", { old: point.id, new: head, ns: params.ns }, "Diff with head")));
  }
  const writer = made && made.metadata && made.metadata.writer;
  body.append(h("dl", { class: "meta" },
    h("dt", {}, "Created"), h("dd", {}, timeEl(found.created_at)),
    h("dt", {}, "Updated"), h("dd", {}, timeEl(found.updated_at)),
    h("dt", {}, "Expires"), h("dd", {}, found.expires_at ? timeEl(found.expires_at) : "never"),
    h("dt", {}, "Author"), h("dd", {}, found.author || "—"),
    h("dt", {}, "Sources"), h("dd", { id: "sources" }, sourceList(found.sources, { at, writer })),
    h("dt", {}, "Written by commit"), h("dd", {}, made ? [link("commit", { id: made.id }, short(made.id), { class: "mono" }), ` “${made.message}” `, timeEl(made.time)] : "—"),
    writer ? [h("dt", {}, "Writer run"), h("dd", {}, runLink(writer, `${writer.run} (${writer.target})`))] : null));
  body.append(h("div", { class: "actions" }, link("blame", { ns: params.ns, key: params.key, ref: at }, "Blame / history", { class: "button" }),
    link("search", { at, ns: params.ns }, "Search this namespace here", { class: "button" })));
  body.append(h("h3", {}, "Value"), jsonBlock(found.value));
  body.append(editActions(params.ns, params.key, at, found));
  if (!canWrite()) body.append(h("p", { class: "muted" }, "Read-only view."));
}
