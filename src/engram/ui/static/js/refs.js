// Refs as a person reads and types them: a text input with the ref picker (branches, tags and recent commits,
// from the session's <datalist>), and a ref shown short (a commit id as its first 10 characters, also in
// <id>~1; main@{time} as "main as of" a formatted time), the full ref in its title.
import { REF_OPTIONS } from "./api.js";
import { absTime, h, short } from "./dom.js";

/** An <input> for a ref with the ref picker: refInput({name: "at", value: "main", size: 28}). */
export function refInput(attrs) {
  return h("input", { autocomplete: "off", spellcheck: "false", ...attrs, list: REF_OPTIONS, "data-ref-picker": true });
}

const COMMIT = /^[0-9a-f]{40,64}$/;
const AT_TIME = /^(.*)@\{(.+)\}$/;

/** The short text of one ref: a commit id shortened, ``X@{ISO time}`` as "X as of <time>", else as it is. */
export function refText(ref) {
  if (!ref) return "";
  const dots = ref.match(/^(.+?)(\.{2,3})(.+)$/);
  if (dots && !AT_TIME.test(ref)) return `${refText(dots[1])}${dots[2]}${refText(dots[3])}`;
  const id = ref.match(/^([0-9a-f]{40,64})([~^].*)?$/);
  if (id) return short(id[1]) + (id[2] || "");
  const at = ref.match(AT_TIME);
  if (at && !Number.isNaN(Date.parse(at[2]))) return `${refText(at[1])} as of ${absTime(at[2])}`;
  return ref;
}

/** A ref for a heading: its short text, the full ref in the title. */
export function refLabel(ref) {
  return h("span", { class: COMMIT.test(ref || "") ? "mono" : null, title: ref, "data-ref": ref }, refText(ref));
}
