// Diff: the items that differ between two points (or a commit and its parent), old -> new side by side,
// with word-level highlighting of the text fields that changed; added and removed items show their value inline;
// items sort naturally (error_2 before error_10).
import { api, mainBranch } from "./api.js";
import { refInput, refText } from "./refs.js";
import { field, formValues, h, href, jsonBlock, link, nsText, textLeaves, wordDiffEl } from "./dom.js";

const PAGE = 100;

/** True when ``old`` names both sides, as git spells it (``main...fix``, ``main..fix``; dots in @{time} do not count). */
export const isRange = (old) => old.replace(/@\{[^}]*\}/g, "").includes("..");

const collator = new Intl.Collator(undefined, { numeric: true });
/** Natural order of names: runs of digits compare as numbers (``error_2`` before ``error_10``). */
export const natural = (a, b) => collator.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0);

/** ``a...b`` -> ``b...a`` (the dots kept). */
function swapped(range) {
  const [, a, dots, b] = range.match(/^(.*?)(\.{2,3})(.*)$/) || [null, range, "", ""];
  return `${b}${dots}${a}`;
}

export async function render(out, params) {
  const branch = mainBranch();
  const old = params.old || `${branch}~1`;
  const neu = params.new || (isRange(old) ? "" : branch);
  out.append(h("h1", {}, "Diff ", h("span", { class: "muted", title: neu ? `${old} → ${neu}` : old }, neu ? `${refText(old)} → ${refText(neu)}` : refText(old))));
  const form = h("form", { class: "bar", "aria-label": "Points to compare" },
    field("Old (ref, commit, tag, branch@{time}; or main...fix: what fix brings in since the merge base)", refInput({ name: "old", value: old, size: 34 })),
    field("New", refInput({ name: "new", value: neu, size: 34 })),
    field("Namespace prefix", h("input", { name: "ns", value: params.ns || "", size: 18 })),
    h("button", { type: "submit", class: "primary" }, "Compare"),
    link("diff", neu ? { old: neu, new: old, ns: params.ns } : { old: swapped(old), ns: params.ns }, "Swap"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const v = formValues(form);
    window.location.hash = href("diff", { old: v.old.trim(), new: v.new.trim(), ns: v.ns.trim() });
  });
  out.append(form);
  const found = await api("/v1/diff", { query: { old, new: neu, namespace: params.ns, branch } });
  // The commits compared (main...fix: the merge base), so an item opens where the diff saw it.
  out.append(changeList(found.changes, { at: found.new_commit, old: found.old_commit || found.new_commit }));
}

/** The changes of a diff or a commit: a summary, then each change (the first PAGE, then "show more"). */
export function changeList(changes, { at, old }) {
  const counts = { added: 0, removed: 0, modified: 0 };
  for (const c of changes) counts[c.kind] += 1;
  const order = { modified: 0, removed: 1, added: 2 };
  changes = [...changes].sort((a, b) => order[a.kind] - order[b.kind]
    || natural(nsText(a.namespace), nsText(b.namespace)) || natural(a.key, b.key));
  const box = h("section", { "aria-label": "Changes" },
    h("p", { class: "summary" }, `${changes.length} item${changes.length === 1 ? "" : "s"} changed: `,
      h("span", { class: "kind kind-added" }, `${counts.added} added`), " ",
      h("span", { class: "kind kind-removed" }, `${counts.removed} removed`), " ",
      h("span", { class: "kind kind-modified" }, `${counts.modified} modified`)));
  const list = h("div", {});
  let shown = 0;
  const more = h("button", { type: "button" }, "Show more changes");
  const show = () => {
    for (const c of changes.slice(shown, shown + PAGE)) list.append(change(c, at, old));
    shown += PAGE;
    more.hidden = shown >= changes.length;
  };
  more.addEventListener("click", show);
  show();
  box.append(list, more);
  return box;
}

function change(c, at, old) {
  const ns = nsText(c.namespace);
  const open = c.kind === "removed" ? { at: old, ns, key: c.key } : { at, ns, key: c.key };
  const article = h("article", { class: "change", "data-row": true, "data-key": `${ns}/${c.key}` },
    h("h3", {}, h("span", { class: `kind kind-${c.kind}` }, c.kind), " ",
      h("a", { href: href("state", open), "data-open": true }, `${ns} / ${c.key}`), " ",
      h("small", {}, link("blame", { ns, key: c.key }, "blame"))));
  if (c.kind === "modified") {
    const before = textLeaves(c.old.value);
    const after = textLeaves(c.new.value);
    const texts = Object.keys(after).filter((k) => k in before && before[k] !== after[k]);
    if (texts.length) {
      article.append(h("dl", { class: "meta words" }, texts.map((k) => [h("dt", {}, k), h("dd", {}, wordDiffEl(before[k], after[k]))])));
    }
  }
  if (c.kind === "modified") {
    article.append(h("div", { class: "sides" }, h("div", {}, h("h4", {}, "old"), jsonBlock(c.old.value)),
      h("div", {}, h("h4", {}, "new"), jsonBlock(c.new.value))));
  } else {
    const present = c.kind === "added" ? c.new : c.old;
    article.append(h("details", { open: true, class: "value" }, h("summary", {}, c.kind === "added" ? "new value" : "old value"), jsonBlock(present.value)));
  }
  return article;
}
