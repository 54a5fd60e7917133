// Branches and review: list branches and tags; compare a branch with main; merge (the conflict list, then a
// chosen policy); create a branch from any point; writer review branches: approve = merge, reject = delete.
import { api, canAdmin, canWrite, mainBranch, session } from "./api.js";
import { changeList } from "./diff.js";
import { createRef, showMade } from "./commit.js";
import { confirmDialog, errorBox, field, h, href, jsonBlock, link, nsText, select, short, writeButton } from "./dom.js";

const STRATEGIES = [["fail", "fail: stop and list the conflicts"], ["ours", "ours: keep the target branch's version"],
  ["theirs", "theirs: take the merged branch's version"], ["newest", "newest: the most recently updated version"]];
const WRITER = /^writer\/([^/]+)\/(.+)$/;

export async function render(out, params) {
  const head = mainBranch();
  const names = Object.keys(session.branches).sort();
  const review = names.filter((n) => WRITER.test(n));
  const plain = names.filter((n) => !WRITER.test(n));
  const result = h("div", { id: "action-result", "aria-live": "polite" });
  out.append(h("h1", {}, "Branches and review"), result);
  if (!canWrite()) out.append(h("p", { class: "muted" }, "Read-only: merging, reverting and creating branches need an API key with the write scope."));
  out.append(h("h2", {}, `Branches (${plain.length})`), h("table", { "aria-label": "Branches" },
    h("thead", {}, h("tr", {}, h("th", {}, "Branch"), h("th", {}, "Head"), h("th", {}, "Actions"))),
    h("tbody", {}, plain.map((name) => h("tr", { "data-row": true, "data-branch": name },
      h("td", {}, h("a", { href: href("timeline", { branch: name }), "data-open": true }, name), name === head ? h("span", { class: "muted" }, " (default)") : null),
      h("td", { class: "mono" }, link("commit", { id: session.branches[name] }, short(session.branches[name]))),
      h("td", {}, h("div", { class: "actions" }, name === head ? null : [
        link("branches", { compare: name }, `Compare with ${head}`, { class: "button" }),
        writeButton(`Merge into ${head}…`, () => merge(name, head, result), { "data-merge": name }),
        canAdmin() ? writeButton("Delete…", () => remove(name, result), { class: "danger" }) : null])))))));
  out.append(h("h2", {}, `Writer review (${review.length})`), review.length ? h("table", { "aria-label": "Writer runs to review" },
    h("thead", {}, h("tr", {}, h("th", {}, "Run"), h("th", {}, "Target"), h("th", {}, "Actions"))),
    h("tbody", {}, review.map((name) => {
      const [, target, run] = name.match(WRITER);
      return h("tr", { "data-row": true, "data-review": name },
        h("td", {}, h("a", { href: href("branches", { compare: name }), "data-open": true }, run)), h("td", {}, target),
        h("td", {}, h("div", { class: "actions" }, link("branches", { compare: name }, "Review changes", { class: "button" }),
          writeButton("Approve (merge)…", () => decide("approve", target, run, result), { "data-approve": run }),
          writeButton("Reject (delete)…", () => decide("reject", target, run, result), { class: "danger", "data-reject": run }))));
    }))) : h("p", { class: "muted" }, "No writer run waits for review."));
  out.append(h("h2", {}, "Create a branch"), createForm(params, result));
  const tags = Object.entries(session.tags).sort();
  out.append(h("h2", {}, `Tags (${tags.length})`), h("ul", {}, tags.map(([name, id]) =>
    h("li", {}, h("span", { class: "ref tag" }, name), " ", link("state", { at: name }, short(id), { class: "mono" })))));
  if (params.compare) await compare(out, params.compare, head, result);
}

function createForm(params, result) {
  const at = h("input", { name: "at", value: params.at || mainBranch(), size: 36 });
  const form = h("form", { class: "bar", "aria-label": "Create a branch" },
    field("From any point (ref, commit, tag, branch@{time})", at),
    canWrite() ? h("button", { type: "submit", class: "primary" }, "Create branch…") : h("span", { class: "muted" }, "needs the write scope"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    createRef("branch", at.value.trim(), result).then(() => null);
  });
  return form;
}

async function compare(out, name, head, result) {
  const section = h("section", { "aria-label": `Compare ${name} with ${head}`, id: "compare" },
    h("h2", {}, `Compare ${name} with ${head}`),
    h("p", {}, `What ${name} holds that ${head} does not (and the reverse), item by item. `,
      link("diff", { old: head, new: name }, "open as a diff"), " · ", link("timeline", { branch: name }, `${name}'s timeline`)));
  const m = name.match(WRITER);
  if (m) {
    section.append(h("div", { class: "actions" },
      writeButton("Approve (merge)…", () => decide("approve", m[1], m[2], result)),
      writeButton("Reject (delete)…", () => decide("reject", m[1], m[2], result), { class: "danger" })));
  } else section.append(h("div", { class: "actions" }, writeButton(`Merge into ${head}…`, () => merge(name, head, result))));
  const { changes } = await api("/v1/diff", { query: { old: head, new: name } });
  section.append(changeList(changes, { at: name, old: head }));
  out.append(section);
}

/** Merge ``source`` into ``into``: confirm with a policy; a refused merge lists its conflicts and asks again. */
async function merge(source, into, result, conflicts = null) {
  const strategy = select("strategy", STRATEGIES, conflicts ? "theirs" : "fail", { id: "merge-strategy" });
  const message = h("input", { name: "message", size: 40, placeholder: `merge ${source} into ${into}` });
  const body = [h("p", {}, `A merge commit on ${into} will bring in what ${source} changed.`)];
  if (conflicts) body.push(conflictList(conflicts));
  body.push(field("When both sides changed an item", strategy), field("Message (optional)", message));
  const ok = await confirmDialog(conflicts ? `Conflicts merging ${source}` : `Merge ${source} into ${into}?`, body, "Merge");
  if (!ok) return;
  try {
    const made = await api("/v1/merge", { method: "POST", body: { source, into, strategy: strategy.value, message: message.value.trim() || undefined } });
    showMade(result, `Merged ${source} into ${into} (${strategy.value})`, made.commit);
  } catch (error) {
    if (error.code === "merge_conflict" && error.details) {
      result.replaceChildren(errorBox(error), conflictList(error.details));
      await merge(source, into, result, error.details);
    } else result.replaceChildren(errorBox(error));
  }
}

function conflictList(details) {
  return h("div", { class: "conflicts", id: "conflicts" }, h("h3", {}, `${details.conflict_count} conflict${details.conflict_count === 1 ? "" : "s"}`),
    h("ul", {}, details.conflicts.map((c) => h("li", {}, h("strong", {}, `${nsText(c.namespace)} / ${c.key}`),
      h("div", { class: "sides" }, h("div", {}, h("h4", {}, "ours (target)"), c.ours ? jsonBlock(c.ours.value) : "(absent)"),
        h("div", {}, h("h4", {}, "theirs (merged branch)"), c.theirs ? jsonBlock(c.theirs.value) : "(absent)"))))));
}

async function remove(name, result) {
  if (!(await confirmDialog(`Delete branch ${name}?`, h("p", {}, "Its commits stay reachable from the reflog until gc."), "Delete"))) return;
  try {
    await api(`/v1/branches/${encodeURIComponent(name)}`, { method: "DELETE" });
    result.replaceChildren(h("div", { class: "ok" }, `Deleted branch ${name}.`));
  } catch (error) {
    result.replaceChildren(errorBox(error));
  }
}

/** A writer run's review: approve merges its branch (then deletes it), reject deletes it. */
async function decide(verb, target, run, result) {
  const strategy = select("strategy", STRATEGIES, "fail");
  const ok = await confirmDialog(`${verb === "approve" ? "Approve" : "Reject"} writer run ${run}?`, verb === "approve"
    ? [h("p", {}, `Merge its memories into ${target}'s branch.`), field("When both sides changed a memory", strategy)]
    : h("p", {}, "Delete its review branch; its turns stay processed."), verb === "approve" ? "Approve" : "Reject");
  if (!ok) return;
  try {
    const path = `/v1/writer/${encodeURIComponent(target)}/runs/${encodeURIComponent(run)}/${verb}`;
    const record = await api(path, { method: "POST", body: verb === "approve" ? { strategy: strategy.value } : undefined });
    const merged = record && (record.merge || (record.run && record.run.merge));
    result.replaceChildren(h("div", { class: "ok" }, `${verb === "approve" ? "Approved" : "Rejected"} run ${run}.`,
      merged ? [" Merge commit ", link("commit", { id: merged }, short(merged), { class: "mono" })] : null));
  } catch (error) {
    result.replaceChildren(errorBox(error));
  }
}
