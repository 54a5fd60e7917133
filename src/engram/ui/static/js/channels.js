// Channels and notes: channels, threads, confidence and feedback, readable as of a time (as one agent).
import { api, getAgent, mainBranch, setAgent } from "./api.js";
import { errorBox, field, h, href, isoToLocal, link, localToIso, timeEl } from "./dom.js";

export async function render(out, params) {
  if (params.agent && params.agent !== getAgent()) setAgent(params.agent);
  const agent = getAgent();
  out.append(h("h1", {}, "Channels ", h("span", { class: "muted" }, agent ? `as ${agent}` : "")));
  const agentInput = h("input", { name: "agent", value: agent, size: 18, required: true, id: "agent" });
  const when = h("input", { type: "datetime-local", name: "when", value: isoToLocal(params.asof) });
  const form = h("form", { class: "bar", "aria-label": "Agent and time" }, field("Act as agent", agentInput),
    field("Read as of (empty: now)", when), h("button", { type: "submit", class: "primary" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setAgent(agentInput.value.trim());
    window.location.hash = href("channels", { agent: agentInput.value.trim(), channel: params.channel, asof: localToIso(when.value) });
  });
  out.append(form);
  if (!agent) {
    out.append(h("p", { class: "muted" }, "Channels are read as an agent: name one (its API key must be bound to it)."));
    return;
  }
  const at = params.asof ? `${mainBranch()}@{${params.asof}}` : undefined;
  let channels;
  try {
    channels = await api("/v1/channels", { agent: true });
  } catch (error) {
    out.append(errorBox(error));
    return;
  }
  const side = h("nav", { class: "tree", "aria-label": "Channels" }, h("h2", {}, `Channels (${channels.length})`),
    h("ul", {}, channels.map((c) => h("li", { "data-row": true }, h("a", { href: href("channels", { ...params, channel: c.name }), "data-open": true,
      "aria-current": c.name === params.channel ? "true" : null }, `#${c.name}`), h("span", { class: "muted" }, ` ${c.count} · ${c.kind}`)))),
    link("channels", { ...params, channel: "", notes: "1" }, "My notes"));
  const body = h("section", {});
  out.append(h("div", { class: "cols" }, side, body));
  if (params.notes === "1") await notes(body);
  else if (params.channel) await channel(body, params.channel, at, params.asof, params.message);
  else body.append(h("p", { class: "muted" }, "Choose a channel."));
}

async function channel(body, name, at, asof, focus) {
  const messages = await api(`/v1/channels/${encodeURIComponent(name)}/messages`, { agent: true, query: { limit: 200, at } });
  body.append(h("h2", {}, `#${name}`, asof ? h("span", { class: "muted" }, " as of ", timeEl(asof)) : null),
    h("p", { class: "muted" }, `${messages.length} messages, oldest first; replies under the message they answer.`));
  const byParent = new Map();
  for (const m of messages) {
    const parent = m.reply_to || m.thread || "";
    if (!byParent.has(parent)) byParent.set(parent, []);
    byParent.get(parent).push(m);
  }
  const known = new Set(messages.map((m) => m.id));
  const roots = messages.filter((m) => !(m.reply_to || m.thread) || !known.has(m.reply_to || m.thread));
  const thread = (m) => h("div", { class: "msg", "data-message": m.id }, message(m),
    (byParent.get(m.id) || []).length ? h("div", { class: "thread", "aria-label": "replies" }, byParent.get(m.id).map(thread)) : null);
  body.append(h("div", {}, roots.map(thread)));
  const opened = focus && body.querySelector(`[data-message="${CSS.escape(focus)}"]`);
  if (opened) {
    opened.classList.add("selected");
    opened.id = "opened-message";
    opened.scrollIntoView({ block: "center" });
  } else if (focus) body.append(h("p", { class: "muted", id: "opened-message-missing" }, `Message ${focus} is not among the last 200 of #${name}.`));
}

function message(m) {
  const up = Object.values(m.feedback || {}).filter(Boolean).length;
  const down = Object.values(m.feedback || {}).length - up;
  return [h("div", { class: "head" }, h("strong", {}, m.sender), timeEl(m.created_at),
    h("span", { title: "confidence" }, `confidence ${Number(m.confidence).toFixed(2)}`),
    Object.keys(m.feedback || {}).length ? h("span", { title: "feedback" }, `feedback: worked ${up}, did not ${down}`) : null,
    m.edited ? h("span", { class: "badge" }, "edited") : null,
    (m.tags || []).map((t) => h("span", { class: "ref tag" }, t))), h("div", {}, m.content)];
}

async function notes(body) {
  const found = await api("/v1/notes/recent", { agent: true, query: { limit: 50 } });
  body.append(h("h2", {}, "My notes"), h("div", {}, found.map((m) => h("div", { class: "msg" }, message(m),
    (m.breadcrumbs || []).length ? h("div", { class: "muted" }, "breadcrumbs: ", m.breadcrumbs.map((b) => JSON.stringify(b)).join(", ")) : null))));
}
