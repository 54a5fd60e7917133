// The one door to the server: engram's public HTTP API, with the API key the user entered (sessionStorage).
const KEY = "engram.key";
const AGENT = "engram.agent";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export const getKey = () => sessionStorage.getItem(KEY) || "";
export const getAgent = () => sessionStorage.getItem(AGENT) || "";
export function setKey(value) { value ? sessionStorage.setItem(KEY, value) : sessionStorage.removeItem(KEY); }
export function setAgent(value) { value ? sessionStorage.setItem(AGENT, value) : sessionStorage.removeItem(AGENT); }

/** Call the API: api("/v1/log", {query: {limit: 5}}), api("/v1/merge", {method: "POST", body: {...}}). */
export async function api(path, { method = "GET", query = {}, body, agent = false } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const headers = { Accept: "application/json" };
  const key = getKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (agent && getAgent()) headers["X-Engram-Agent"] = getAgent();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || "http_error", error.message || response.statusText, error.details);
  }
  if (isWrite(method, path)) invalidateSession();
  return data;
}

/** Reads sent as POST (a search is no write): they leave the cached session as it is. */
const READS = new Set(["/v1/search", "/v1/context", "/v1/items/lookup", "/v1/messages/search", "/v1/notes/search"]);
const isWrite = (method, path) => method !== "GET" && !READS.has(new URL(path, window.location.origin).pathname);

/** What every view shares: the caller (from /v1/whoami), the branches and tags, and the recent commits of the
 * default branch (the ref pickers' choices). Loaded once and kept across views; a write the UI makes (any
 * request but a read), a new API key or a minute's age loads them again, and ``{refs: true}`` reloads the
 * branches, tags and commits (for a view whose content they are). */
export const session = { who: null, whoError: null, branches: {}, tags: {}, recent: [], loadedAt: 0, key: null };
const MAX_AGE_MS = 60_000;
let loading = null;

export function invalidateSession() { session.loadedAt = 0; }

export async function loadSession({ refs = false } = {}) {
  const fresh = session.loadedAt && session.key === getKey() && Date.now() - session.loadedAt < MAX_AGE_MS;
  if (fresh && !refs) return;
  if (fresh && !loading) loading = fetchRefs();
  loading ||= fetchSession();
  const done = loading;
  await done.finally(() => { if (loading === done) loading = null; });
}

async function fetchSession() {
  session.key = getKey();
  try {
    session.who = await api("/v1/whoami");
    session.whoError = null;
  } catch (error) {
    session.who = null;
    session.whoError = error;
    session.loadedAt = 0;
    return;
  }
  await fetchRefs();
}

async function fetchRefs() {
  const [branches, tags, recent] = await Promise.all([api("/v1/branches"), api("/v1/tags"),
    api("/v1/log", { query: { limit: 15 } }).catch(() => ({ commits: [] }))]);
  session.branches = branches.refs;
  session.tags = tags.refs;
  session.recent = recent.commits || [];
  session.loadedAt = Date.now();
  fillRefOptions();
}

/** The ref pickers' shared <datalist id="ref-options">: branches, tags and recent commits of the default branch. */
export const REF_OPTIONS = "ref-options";
function fillRefOptions() {
  let list = document.getElementById(REF_OPTIONS);
  if (!list) {
    list = document.createElement("datalist");
    list.id = REF_OPTIONS;
    document.body.append(list);
  }
  const option = (value, label) => {
    const el = document.createElement("option");
    el.value = value;
    el.label = label;
    el.textContent = label;
    return el;
  };
  list.replaceChildren(
    ...Object.keys(session.branches).sort().map((name) => option(name, `branch · ${session.branches[name].slice(0, 10)}`)),
    ...Object.keys(session.tags).sort().map((name) => option(name, `tag · ${session.tags[name].slice(0, 10)}`)),
    ...session.recent.map((c) => option(c.id.slice(0, 10), `commit · ${c.message} · ${c.author}`)));
}

export const canWrite = () => Boolean(session.who && session.who.scopes.includes("write"));
export const canAdmin = () => Boolean(session.who && session.who.scopes.includes("admin"));
export const mainBranch = () => (session.who && session.who.branch) || "main";

/** Branch and tag names pointing at each commit id: {id: [{name, kind}]}. */
export function refsById() {
  const found = {};
  for (const [name, id] of Object.entries(session.branches)) (found[id] ||= []).push({ name, kind: "branch" });
  for (const [name, id] of Object.entries(session.tags)) (found[id] ||= []).push({ name, kind: "tag" });
  return found;
}
