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
  return data;
}

/** What every view shares: the caller (from /v1/whoami), and the branches and tags, refreshed on each route. */
export const session = { who: null, whoError: null, branches: {}, tags: {} };

export async function loadSession() {
  try {
    session.who = await api("/v1/whoami");
    session.whoError = null;
  } catch (error) {
    session.who = null;
    session.whoError = error;
    return;
  }
  const [branches, tags] = await Promise.all([api("/v1/branches"), api("/v1/tags")]);
  session.branches = branches.refs;
  session.tags = tags.refs;
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
