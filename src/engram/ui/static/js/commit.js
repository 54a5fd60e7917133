// One commit: who, when, why, its parents and metadata (writer run, reverts), the changes it made, and the
// actions at this point: revert it (with an author and a message; a conflicting revert lists its conflicts and
// asks again with a strategy), branch or tag from it (each confirmed, showing the commit made).
import { api, canWrite, mainBranch, session } from "./api.js";
import { changeList } from "./diff.js";
import { confirmDialog, conflictList, errorBox, field, h, href, jsonBlock, link, provenanceFields, select, short, timeEl, toast, writeButton } from "./dom.js";

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

const STRATEGIES = [["fail", "fail: stop and list the conflicts"], ["ours", "ours: keep the branch's current version"],
  ["theirs", "theirs: undo anyway (the version before the commit)"], ["newest", "newest: the most recently updated"]];
const SIDES = { base: "base (what the commit wrote)", ours: "ours (the branch now)", theirs: "theirs (before the commit)" };

/** Revert commit ``c``: confirm with a branch, a policy, an author and a message; a refused revert lists its
 * conflicts (base, ours, theirs) and asks again with a strategy, as a merge does. */
async function revert(c, result, conflicts = null, typed = null) {
  const branches = Object.keys(session.branches).sort();
  const branch = select("branch", branches, typed ? typed.branch : mainBranch(), { id: "revert-branch" });
  const strategy = select("strategy", STRATEGIES, conflicts ? "theirs" : "fail", { id: "revert-strategy" });
  const who = provenanceFields("revert", session.who, `revert ${short(c.id)}: ${c.message}`);
  if (typed) { who.author.value = typed.author || ""; who.message.value = typed.message || ""; }
  const body = [h("p", {}, `A new commit will undo what “${c.message}” changed (${c.changes.length} items).`)];
  if (conflicts) body.push(h("p", {}, "Later commits changed these items again: choose which version to keep."), conflictList(conflicts, SIDES));
  body.push(field("On branch", branch), field("If the items changed since", strategy), ...who.fields);
  const ok = await confirmDialog(conflicts ? `Conflicts reverting ${short(c.id)}` : `Revert ${short(c.id)}?`, body, "Revert");
  if (!ok) return;
  const sent = { branch: branch.value, ...who.body() };
  try {
    const made = await api("/v1/revert", { method: "POST", body: { ref: c.id, strategy: strategy.value, ...sent } });
    if (made.nothing_to_revert) {
      result.replaceChildren(h("div", { class: "notice", id: "nothing-reverted", role: "note" },
        `Nothing to revert: ${branch.value} already lacks what ${short(c.id)} changed (never had it, or it was reverted). `,
        "No commit was made; the head stays at ", link("commit", { id: made.commit.id }, short(made.commit.id), { class: "mono" }), "."));
      toast(`Nothing to revert on ${branch.value}`);
    } else result.replaceChildren(madeNotice(`Reverted on ${branch.value}`, made.commit));
  } catch (error) {
    if (error.code === "merge_conflict" && error.details) {
      result.replaceChildren(errorBox(error), conflictList(error.details, SIDES));
      await revert(c, result, error.details, sent);
    } else result.replaceChildren(errorBox(error));
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

/** The notice of a commit a write made (with a toast): what was done, and a link to the commit. */
export function madeNotice(what, commit) {
  toast(`${what}: ${short(commit.id)}`);
  return h("div", { class: "ok", "data-made": commit.id }, `${what}: commit `,
    h("a", { href: href("commit", { id: commit.id }), class: "mono" }, short(commit.id)), ` “${commit.message}”`);
}
