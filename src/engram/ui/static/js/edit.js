// Fixing a memory where it was found: edit or delete one item on a branch (a new fix branch by default, started
// from the branch being viewed or the main one), with an author (prefilled with the key's identity) and a message;
// then review and merge it from the Branches view. The same scopes as the HTTP API: a key without the write scope
// sees no edit buttons, and a write the server refuses (403) says why.
import { api, canWrite, mainBranch, session } from "./api.js";
import { confirmDialog, errorBox, field, h, href, link, pretty, provenanceFields, select, short, toast } from "./dom.js";

const NEW = "\u0000new"; // the "a new branch" choice of the branch picker (no branch can be named so)
const REVIEW = /^writer\//;
let pendingNotice = null;

/** What the last write from this module did, for the view drawn after it (the router shows it once). */
export function takeNotice() {
  const notice = pendingNotice;
  pendingNotice = null;
  return notice;
}

/** The item's write actions ("Edit on a branch…", "Delete on a branch…") for the State view, or why there are none.
 * ``ns`` is dot-joined, ``at`` the point viewed, ``item`` the item as the API returned it. */
export function editActions(ns, key, at, item) {
  if (!canWrite()) {
    return h("p", { class: "muted", id: "edit-read-only" }, "Read-only: editing or deleting this item needs an API key with the write scope.");
  }
  const result = h("div", { id: "edit-result", "aria-live": "polite" });
  const target = { ns, key, at, item, result };
  return h("div", { class: "edit" }, h("div", { class: "actions" },
    h("button", { type: "button", id: "edit-item", onclick: () => ask("edit", target) }, "Edit on a branch…"),
    h("button", { type: "button", id: "delete-item", class: "danger", onclick: () => ask("delete", target) }, "Delete on a branch…")), result);
}

/** A branch name for the fix that no branch has yet: fix/<key>, fix/<key>-2, ... */
function fixName(key) {
  const base = `fix/${key.toLowerCase().replace(/[^a-z0-9._-]+/g, "-").replace(/^[-.]+|[-.]+$/g, "") || "item"}`;
  let name = base;
  for (let n = 2; name in session.branches; n++) name = `${base}-${n}`;
  return name;
}

/** Where a new branch starts: the branch being viewed, else the main branch's head (never a point in the past,
 * whose later history the fix would lose). */
const startOf = (at) => (at in session.branches ? at : mainBranch());

/** Ask for the branch, the value (an edit), the author and the message; ``typed`` keeps what the user typed when the
 * dialog comes back after a mistake, ``problem`` says what it was. */
async function ask(verb, target, typed = null, problem = null) {
  const { ns, key, at, item, result } = target;
  const start = startOf(at);
  const names = Object.keys(session.branches).filter((n) => !REVIEW.test(n)).sort();
  const viewed = at in session.branches && at !== mainBranch() && !REVIEW.test(at) ? at : NEW;
  const branch = select("branch", [[NEW, `a new branch from ${start}`], ...names.map((n) => [n, n])], typed ? typed.branch : viewed, { id: "edit-branch" });
  const name = h("input", { name: "name", id: "edit-new-branch", size: 30, autocomplete: "off", spellcheck: "false", value: typed ? typed.name : fixName(key) });
  const nameField = field("New branch name", name);
  const showName = () => { nameField.hidden = branch.value !== NEW; };
  branch.addEventListener("change", showName);
  showName();
  const value = h("textarea", { name: "value", id: "edit-value", rows: 10, cols: 60, spellcheck: "false", class: "mono" });
  value.value = typed ? typed.value : pretty(item.value);
  const who = provenanceFields("edit", session.who, `${verb} ${ns}/${key}`);
  if (typed) { who.author.value = typed.author; who.message.value = typed.message; }
  const body = [h("p", {}, verb === "edit"
    ? `A commit on the branch you choose will replace ${ns} / ${key}; review and merge it from Branches afterwards.`
    : `A commit on the branch you choose will delete ${ns} / ${key}; review and merge it from Branches afterwards.`)];
  if (problem) body.push(h("div", { id: "edit-problem" }, problem));
  body.push(field("On branch", branch), nameField);
  if (verb === "edit") body.push(field(`Value (JSON object; prefilled with the value at ${at.length > 24 ? short(at) : at})`, value));
  body.push(...who.fields);
  const title = `${verb === "edit" ? "Edit" : "Delete"} ${ns} / ${key}`;
  if (!(await confirmDialog(title, body, verb === "edit" ? "Save on the branch" : "Delete on the branch"))) return;
  const now = { branch: branch.value, name: name.value.trim(), value: value.value, author: who.author.value, message: who.message.value };
  const again = (why) => ask(verb, target, now, why);
  let parsed;
  if (verb === "edit") {
    try {
      parsed = JSON.parse(now.value);
    } catch (error) {
      return again(errorBox(`The value is not JSON: ${error.message}`));
    }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) return again(errorBox("The value must be a JSON object ({...})."));
  }
  if (now.branch === NEW && !now.name) return again(errorBox("Name the new branch (or choose an existing one)."));
  const onto = now.branch === NEW ? now.name : now.branch;
  const sent = who.body();
  let created = false;
  try {
    if (now.branch === NEW) {
      await api("/v1/branches", { method: "POST", body: { name: onto, at: start } });
      created = true;
      session.branches[onto] = ""; // known from now on (a retry offers it instead of creating it twice)
    }
    const made = verb === "edit"
      ? await api("/v1/items", { method: "PUT", body: { namespace: ns.split("."), key, value: parsed, branch: onto, sources: item.sources, ...sent } })
      : await api("/v1/items", { method: "DELETE", query: { namespace: ns, key, branch: onto, ...sent } });
    done(verb, target, onto, created, made.commit);
  } catch (error) {
    if (created) now.branch = onto;
    if (error.status === 401 || error.status === 403) result.replaceChildren(refused(error, onto, created));
    else return again(h("div", {}, errorBox(error), created ? h("p", {}, `Branch ${onto} was created; the write can go there.`) : null));
  }
}

/** The server refused the write: what the key may not do, in words, and what would let it. */
function refused(error, onto, created) {
  const what = error.status === 401 ? "This server needs a valid API key to write" : "This API key may not write here";
  return h("div", { class: "error", role: "alert", id: "edit-refused" },
    `${what}: ${error.message} (${error.code}, HTTP ${error.status}). Nothing was changed${created ? ` (branch ${onto} was created)` : ""}. `,
    "Enter a key with the write scope for this namespace (API key, top right) and try again.");
}

/** After the write: the item on its branch, with what was done and the way to review and merge it. */
function done(verb, target, onto, created, commit) {
  const { ns, key } = target;
  const main = mainBranch();
  toast(`${verb === "edit" ? "Edited" : "Deleted"} ${ns} / ${key} on ${onto}: ${short(commit.id)}`);
  pendingNotice = h("div", { class: "ok", id: "edit-done", "data-made": commit.id, "data-branch": onto },
    `${verb === "edit" ? "Edited" : "Deleted"} ${ns} / ${key} on ${created ? "the new branch " : "branch "}${onto}: commit `,
    h("a", { href: href("commit", { id: commit.id }), class: "mono" }, short(commit.id)), ` “${commit.message}” by ${commit.author}. `,
    onto === main ? null : ["Next: ", link("branches", { compare: onto }, `review ${onto} against ${main} and merge it`, { id: "review-fix" }), "."]);
  const next = href("state", verb === "edit" ? { at: onto, ns, key } : { at: onto, ns });
  if (window.location.hash === next) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else window.location.hash = next;
}
