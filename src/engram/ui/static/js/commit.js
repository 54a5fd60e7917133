// One commit: who, when, why, its parents and metadata (writer run, reverts), the changes it made, and the
// actions at this point: revert it, branch or tag from it (each confirmed, showing the commit made).
import { api, canWrite, mainBranch, session } from "./api.js";
import { changeList } from "./diff.js";
import { confirmDialog, errorBox, field, h, href, jsonBlock, link, select, short, timeEl, toast, writeButton } from "./dom.js";

export async function render(out, params) {
  const c = await api(`/v1/commits/${encodeURIComponent(params.id || "HEAD")}`, { query: { branch: params.branch } });
  out.append(h("h1", {}, "Commit ", h("span", { class: "mono" }, short(c.id)), " ", h("span", { class: "muted" }, c.message)));
  const writer = c.metadata && c.metadata.writer;
  out.append(h("dl", { class: "meta" },
    h("dt", {}, "Id"), h("dd", { class: "mono" }, c.id),
    h("dt", {}, "Author"), h("dd", {}, c.author),
    h("dt", {}, "Time"), h("dd", {}, timeEl(c.time)),
    h("dt", {}, "Parents"), h("dd", {}, c.parents.length ? c.parents.map((p) => [link("commit", { id: p }, short(p), { class: "mono" }), " "]) : "none (first commit)"),
    writer ? [h("dt", {}, "Writer run"), h("dd", {}, `${writer.run} for ${writer.target}${writer.model ? " (" + writer.model + ")" : ""}`)] : null,
    Object.keys(c.metadata || {}).length ? [h("dt", {}, "Metadata"), h("dd", {}, jsonBlock(c.metadata))] : null));
  const result = h("div", { id: "action-result", "aria-live": "polite" });
  out.append(h("div", { class: "actions" },
    link("state", { at: c.id }, "Open the memory at this commit", { class: "button" }),
    link("diff", { old: c.id, new: mainBranch() }, "Diff with head", { class: "button" }),
    link("timeline", { ref: c.id }, "History from here", { class: "button" }),
    writeButton("Revert this commit…", () => revert(c, result), { class: "danger", id: "revert" }),
    writeButton("Branch from here…", () => createRef("branch", c.id, result), { id: "branch-here" }),
    writeButton("Tag…", () => createRef("tag", c.id, result))), result);
  if (!canWrite()) out.append(h("p", { class: "muted" }, "Read-only: write actions need an API key with the write scope."));
  out.append(h("h2", {}, "Changes ", h("span", { class: "muted" }, c.parents.length ? `vs parent ${short(c.parents[0])}` : "(first commit)")));
  out.append(changeList(c.changes, { at: c.id, old: c.parents.length ? c.parents[0] : c.id }));
}

const STRATEGIES = [["fail", "fail: stop on a conflict"], ["ours", "ours: keep the branch's version"],
  ["theirs", "theirs: take the other version"], ["newest", "newest: the most recently updated"]];

async function revert(c, result) {
  const branches = Object.keys(session.branches).sort();
  const branch = select("branch", branches, mainBranch(), { id: "revert-branch" });
  const strategy = select("strategy", STRATEGIES, "fail", { id: "revert-strategy" });
  const ok = await confirmDialog(`Revert ${short(c.id)}?`, [
    h("p", {}, `A new commit will undo what “${c.message}” changed (${c.changes.length} items).`),
    field("On branch", branch), field("If the items changed since", strategy)], "Revert");
  if (!ok) return;
  try {
    const made = await api("/v1/revert", { method: "POST", body: { ref: c.id, branch: branch.value, strategy: strategy.value } });
    showMade(result, `Reverted on ${branch.value}`, made.commit);
  } catch (error) {
    result.replaceChildren(errorBox(error));
  }
}

/** Create a branch or a tag at ``at`` (any ref), after a confirmation; shows where it points. */
export async function createRef(kind, at, result) {
  const name = h("input", { name: "name", required: true, id: "ref-name", autocomplete: "off" });
  const ok = await confirmDialog(`Create a ${kind} at ${short(at) || at}`, [
    h("p", {}, `The ${kind} will point at ${at}.`), field(`${kind[0].toUpperCase() + kind.slice(1)} name`, name)], `Create ${kind}`);
  if (!ok || !name.value.trim()) return;
  try {
    const made = await api(kind === "branch" ? "/v1/branches" : "/v1/tags", { method: "POST", body: { name: name.value.trim(), at } });
    result.replaceChildren(h("div", { class: "ok" }, `Created ${kind} ${made.name} at `,
      link("commit", { id: made.commit }, short(made.commit), { class: "mono" }), " · ",
      link("timeline", kind === "branch" ? { branch: made.name } : { ref: made.name }, "its timeline")));
    toast(`Created ${kind} ${made.name}`);
  } catch (error) {
    result.replaceChildren(errorBox(error));
  }
}

export function showMade(result, what, commit) {
  result.replaceChildren(h("div", { class: "ok", "data-made": commit.id }, `${what}: commit `,
    h("a", { href: href("commit", { id: commit.id }), class: "mono" }, short(commit.id)), ` “${commit.message}”`));
  toast(`${what}: ${short(commit.id)}`);
}
