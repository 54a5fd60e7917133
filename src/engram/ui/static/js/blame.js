// Blame / history of one item: every version, newest first, with the commit that made it, its author,
// sources and writer run, and what changed from the version before (word-level for text).
import { api, mainBranch } from "./api.js";
import { field, formValues, h, href, jsonBlock, link, short, textLeaves, timeEl, wordDiffEl } from "./dom.js";
import { refInput, refLabel } from "./refs.js";
import { runLink, sourceList } from "./sources.js";

export async function render(out, params) {
  const ref = params.ref || mainBranch();
  out.append(h("h1", {}, "Blame ", h("span", { class: "muted" }, params.key ? [`${params.ns} / ${params.key} up to `, refLabel(ref)] : "")));
  const form = h("form", { class: "bar", "aria-label": "Item" },
    field("Namespace", h("input", { name: "ns", value: params.ns || "", required: true, size: 28, placeholder: "users.alice" })),
    field("Key", h("input", { name: "key", value: params.key || "", required: true, size: 20 })),
    field("Up to", refInput({ name: "ref", value: ref, size: 20 })),
    h("button", { type: "submit", class: "primary" }, "Show history"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const v = formValues(form);
    window.location.hash = href("blame", { ns: v.ns.trim(), key: v.key.trim(), ref: v.ref.trim() });
  });
  out.append(form);
  if (!params.ns || !params.key) {
    out.append(h("p", { class: "muted" }, "Name an item (or open one in the State view and choose Blame)."));
    return;
  }
  const { versions } = await api("/v1/history", { query: { namespace: params.ns, key: params.key, ref } });
  out.append(h("p", {}, `${versions.length} version${versions.length === 1 ? "" : "s"}, newest first.`));
  const list = h("ol", { class: "versions" });
  versions.forEach((v, i) => list.append(version(v, versions[i + 1], params, versions.length - i)));
  out.append(list);
}

function version(v, older, params, number) {
  const c = v.commit;
  const writer = c.metadata && c.metadata.writer;
  const li = h("li", { "data-row": true, class: "msg", "data-commit": c.id, value: number },
    h("div", { class: "head" }, h("a", { href: href("commit", { id: c.id }), class: "mono", "data-open": true }, short(c.id)),
      timeEl(c.time), h("span", {}, `commit by ${c.author}`),
      v.item ? h("span", {}, `item author ${v.item.author || "—"}`) : h("span", { class: "kind kind-removed" }, "deleted"),
      writer ? h("span", { class: "badge" }, runLink(writer)) : null),
    h("div", {}, c.message),
    v.item ? h("div", { class: "sources" }, "sources: ", sourceList(v.item.sources, { at: c.id, writer })) : null);
  if (v.item && older && older.item) {
    const before = textLeaves(older.item.value);
    const after = textLeaves(v.item.value);
    const texts = Object.keys(after).filter((k) => k in before && before[k] !== after[k]);
    if (texts.length) li.append(h("dl", { class: "meta" }, texts.map((k) => [h("dt", {}, k), h("dd", {}, wordDiffEl(before[k], after[k]))])));
  }
  if (v.item) {
    li.append(h("details", {}, h("summary", {}, "value"), jsonBlock(v.item.value)),
      link("state", { at: c.id, ns: params.ns, key: params.key }, "open at this version"));
  }
  return li;
}
