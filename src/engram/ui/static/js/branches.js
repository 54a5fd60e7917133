// Branches and review: list branches and tags; compare a branch with main from the merge base (what the branch
// brings in, as `main...branch` means in git; the two-dot view of the two heads on request); merge (with an author
// and message; the conflict list, then a chosen policy); create a branch from any point; writer review branches:
// approve = merge, reject = delete. A write re-renders the view (branch heads, the compare, the merge offers).
import { api, canAdmin, canWrite, loadSession, mainBranch, session } from "./api.js";
import { changeList } from "./diff.js";
import { createRef, madeNotice } from "./commit.js";
import { refInput } from "./refs.js";
import { confirmDialog, conflictList, errorBox, field, h, href, link, provenanceFields, select, short, writeButton } from "./dom.js";

const STRATEGIES = [["fail", "fail: stop and list the conflicts"], ["ours", "ours: keep the target branch's version"],
  ["theirs", "theirs: take the merged branch's version"], ["newest", "newest: the most recently updated version"]];
const WRITER = /^writer\/([^/]+)\/(.+)$/;

const SIDES = { base: "base (where the branches forked)", ours: "ours (target)", theirs: "theirs (merged branch)" };

export async function render(out, params, notice = null) {
  const head = mainBranch();
  const names = Object.keys(session.branches).sort();
  const review = names.filter((n) => WRITER.test(n));
  const plain = names.filter((n) => !WRITER.test(n));
  const result = h("div", { id: "action-result", "aria-live": "polite" }, notice);
  const again = (shown) => refresh(out, params, shown);
  // The compare is read first: a branch with nothing left to bring in gets no merge offer anywhere.
  const compared = params.compare ? await compareDiff(params.compare, head, params.dots === "2") : null;
  const mergeable = (name) => !(compared && compared.name === name && compared.threeDot && !compared.changes.length);
  out.append(h("h1", {}, "Branches and review"), result);
  if (!canWrite()) out.append(h("p", { class: "muted" }, "Read-only: merging, reverting and creating branches need an API key with the write scope."));
  out.append(h("h2", {}, `Branches (${plain.length})`), h("table", { "aria-label": "Branches" },
    h("thead", {}, h("tr", {}, h("th", {}, "Branch"), h("th", {}, "Head"), h("th", {}, "Actions"))),
    h("tbody", {}, plain.map((name) => h("tr", { "data-row": true, "data-branch": name },
      h("td", {}, h("a", { href: href("timeline", { branch: name }), "data-open": true }, name), name === head ? h("span", { class: "muted" }, " (default)") : null),
      h("td", { class: "mono" }, link("commit", { id: session.branches[name] }, short(session.branches[name]))),
      h("td", {}, h("div", { class: "actions" }, name === head ? null : [
        link("branches", { compare: name }, `Compare with ${head}`, { class: "button" }),
        mergeable(name) ? writeButton(`Merge into ${head}…`, () => merge(name, head, result, again), { "data-merge": name }) : null,
        canAdmin() ? writeButton("Delete…", () => remove(name, result, again), { class: "danger" }) : null])))))));
  out.append(h("h2", {}, `Writer review (${review.length})`), review.length ? h("table", { "aria-label": "Writer runs to review" },
    h("thead", {}, h("tr", {}, h("th", {}, "Run"), h("th", {}, "Target"), h("th", {}, "Actions"))),
    h("tbody", {}, review.map((name) => {
      const [, target, run] = name.match(WRITER);
      return h("tr", { "data-row": true, "data-review": name },
        h("td", {}, h("a", { href: href("branches", { compare: name }), "data-open": true }, run)), h("td", {}, target),
        h("td", {}, h("div", { class: "actions" }, link("branches", { compare: name }, "Review changes", { class: "button" }),
          writeButton("Approve (merge)…", () => decide("approve", target, run, result, again), { "data-approve": run }),
          writeButton("Reject (delete)…", () => decide("reject", target, run, result, again), { class: "danger", "data-reject": run }))));
    }))) : h("p", { class: "muted" }, "No writer run waits for review."));
  out.append(h("h2", {}, "Create a branch"), createForm(params, result));
  const tags = Object.entries(session.tags).sort();
  out.append(h("h2", {}, `Tags (${tags.length})`), h("ul", {}, tags.map(([name, id]) =>
    h("li", {}, h("span", { class: "ref tag" }, name), " ", link("state", { at: name }, short(id), { class: "mono" })))));
  if (compared) out.append(compareSection(compared, head, result, again));
}

/** Render the view again in place after a write (fresh branch heads and compare), keeping ``notice`` shown;
 * ``data-rendered`` on the view counts the re-renders. */
async function refresh(out, params, notice) {
  await loadSession();
  const fresh = h("div", {});
  const kept = params.compare && !(params.compare in session.branches) ? { ...params, compare: undefined } : params;
  try {
    await render(fresh, kept, notice);
  } catch (error) {
    fresh.replaceChildren(h("div", { id: "action-result" }, notice), errorBox(error));
  }
  out.replaceChildren(...fresh.childNodes);
  out.dataset.rendered = String(Number(out.dataset.rendered || 0) + 1);
}

function createForm(params, result) {
  const at = refInput({ name: "at", value: params.at || mainBranch(), size: 36 });
  const form = h("form", { class: "bar", "aria-label": "Create a branch" },
    field("From any point (ref, commit, tag, branch@{time})", at),
    canWrite() ? h("button", { type: "submit", class: "primary" }, "Create branch…") : h("span", { class: "muted" }, "needs the write scope"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    createRef("branch", at.value.trim(), result).then(() => null);
  });
  return form;
}

/** The compare of branch ``name`` with ``head``: from the merge base (``head...name``, what a merge brings in),
 * or, asked for (``dots=2``), every difference between the two heads (``head..name``). */
async function compareDiff(name, head, twoDot) {
  const old = twoDot ? `${head}..${name}` : `${head}...${name}`;
  const { changes, old_commit: base } = await api("/v1/diff", { query: { old } });
  return { name, old, changes, threeDot: !twoDot, base };
}

function compareSection({ name, old, changes, threeDot, base }, head, result, again) {
  const other = threeDot
    ? link("branches", { compare: name, dots: "2" }, "two-dot view: every difference between the two heads", { id: "two-dot" })
    : link("branches", { compare: name }, "from the merge base: what the merge brings in", { id: "three-dot" });
  const section = h("section", { "aria-label": `Compare ${name} with ${head}`, id: "compare", "data-mode": threeDot ? "merge-base" : "heads" },
    h("h2", {}, `Compare ${name} with ${head}`, h("span", { class: "muted mono" }, ` ${old}`)),
    h("p", {}, threeDot
      ? `What ${name} introduces since it forked from ${head} (the merge base): what merging it brings in. `
      : `Every difference between the heads of ${head} and ${name}, ${head}'s own changes since the fork included. `,
    other, " · ", link("diff", { old }, "open as a diff"), " · ", link("timeline", { branch: name }, `${name}'s timeline`)));
  const m = name.match(WRITER);
  if (threeDot && !changes.length) {
    section.append(h("p", { class: "ok", id: "nothing-to-merge" }, `Nothing left to merge: ${head} already has everything ${name} changed.`));
  } else if (m) {
    section.append(h("div", { class: "actions" },
      writeButton("Approve (merge)…", () => decide("approve", m[1], m[2], result, again)),
      writeButton("Reject (delete)…", () => decide("reject", m[1], m[2], result, again), { class: "danger" })));
  } else section.append(h("div", { class: "actions" }, writeButton(`Merge into ${head}…`, () => merge(name, head, result, again), { "data-merge": name })));
  if (changes.length || !threeDot) section.append(changeList(changes, { at: name, old: (threeDot && base) || head })); // removed: at the merge base
  return section;
}

/** Merge ``source`` into ``into``: confirm with a policy, an author and a message; a refused merge lists its
 * conflicts and asks again; a merge re-renders the view (``again``) with what it did. */
async function merge(source, into, result, again, conflicts = null, typed = null) {
  const strategy = select("strategy", STRATEGIES, conflicts ? "theirs" : "fail", { id: "merge-strategy" });
  const who = provenanceFields("merge", session.who, `merge ${source} into ${into}`);
  if (typed) { who.author.value = typed.author || ""; who.message.value = typed.message || ""; }
  const body = [h("p", {}, `A merge commit on ${into} will bring in what ${source} changed.`)];
  if (conflicts) body.push(conflictList(conflicts, SIDES));
  body.push(field("When both sides changed an item", strategy), ...who.fields);
  const ok = await confirmDialog(conflicts ? `Conflicts merging ${source}` : `Merge ${source} into ${into}?`, body, "Merge");
  if (!ok) return;
  const sent = who.body();
  try {
    const made = await api("/v1/merge", { method: "POST", body: { source, into, strategy: strategy.value, ...sent } });
    await again(made.up_to_date
      ? h("div", { class: "ok", "data-up-to-date": made.commit.id }, `Already up to date: ${into} has everything in ${source}; nothing was merged.`)
      : madeNotice(`Merged ${source} into ${into} (${strategy.value})`, made.commit));
  } catch (error) {
    if (error.code === "merge_conflict" && error.details) {
      result.replaceChildren(errorBox(error), conflictList(error.details, SIDES));
      await merge(source, into, result, again, error.details, sent);
    } else result.replaceChildren(errorBox(error));
  }
}

async function remove(name, result, again) {
  if (!(await confirmDialog(`Delete branch ${name}?`, h("p", {}, "Its commits stay reachable from the reflog until gc."), "Delete"))) return;
  try {
    await api(`/v1/branches/${encodeURIComponent(name)}`, { method: "DELETE" });
    await again(h("div", { class: "ok" }, `Deleted branch ${name}.`));
  } catch (error) {
    result.replaceChildren(errorBox(error));
  }
}

/** A writer run's review: approve merges its branch (then deletes it), reject deletes it. */
async function decide(verb, target, run, result, again) {
  const strategy = select("strategy", STRATEGIES, "fail");
  const ok = await confirmDialog(`${verb === "approve" ? "Approve" : "Reject"} writer run ${run}?`, verb === "approve"
    ? [h("p", {}, `Merge its memories into ${target}'s branch.`), field("When both sides changed a memory", strategy)]
    : h("p", {}, "Delete its review branch; its turns stay processed."), verb === "approve" ? "Approve" : "Reject");
  if (!ok) return;
  try {
    const path = `/v1/writer/${encodeURIComponent(target)}/runs/${encodeURIComponent(run)}/${verb}`;
    const record = await api(path, { method: "POST", body: verb === "approve" ? { strategy: strategy.value } : undefined });
    const merged = record && (record.merge || (record.run && record.run.merge));
    await again(h("div", { class: "ok" }, `${verb === "approve" ? "Approved" : "Rejected"} run ${run}.`,
      merged ? [" Merge commit ", link("commit", { id: merged }, short(merged), { class: "mono" })] : null));
  } catch (error) {
    result.replaceChildren(errorBox(error));
  }
}
