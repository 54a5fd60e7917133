// An item's sources as links: a conversation turn a writer run read opens that run, a channel message (read as
// the agent the UI acts as) opens it in its channel, and every source offers the other items that cite it.
import { api, getAgent } from "./api.js";
import { h, link } from "./dom.js";

const messages = new Map(); // source id -> Promise of the message (null when it is not one this agent may read)
let channelNames = null; // Promise of {channel id: name}

/** The sources of an item written by commit metadata ``writer`` (a writer run's, if any), read at ``at``. */
export function sourceList(sources, { at, writer } = {}) {
  if (!sources || !sources.length) return "—";
  return h("ul", { class: "sources-list" }, sources.map((source) => sourceItem(source, at, writer)));
}

/** A link to writer run ``writer`` ({run, target} of a commit's metadata). */
export function runLink(writer, text = `writer run ${writer.run}`) {
  return link("run", { target: writer.target, run: writer.run }, text, { "data-run": writer.run });
}

function sourceItem(source, at, writer) {
  const others = link("search", { source, at }, "other items from this source", { class: "source-others" });
  if (writer && (source === writer.run || (writer.messages || []).includes(source))) {
    return h("li", { "data-source": source, "data-kind": "run" }, h("code", {}, source), " read by ",
      runLink(writer), " · ", others);
  }
  const li = h("li", { "data-source": source, "data-kind": "source" }, h("code", {}, source), " · ", others);
  if (getAgent()) asMessage(li, source, others);
  return li;
}

/** When ``source`` is a channel message this agent may read, make it a link to the message in its channel. */
async function asMessage(li, source, others) {
  const message = await readMessage(source);
  if (!message) return;
  const names = await channels();
  const channel = names[message.channel] || message.channel;
  li.dataset.kind = "message";
  li.replaceChildren(link("channels", { agent: getAgent(), channel, message: message.id }, h("code", {}, source), { class: "source-message" }),
    ` message by ${message.sender} in #${channel} · `, others);
}

function readMessage(source) {
  if (!messages.has(source)) {
    messages.set(source, api(`/v1/messages/${encodeURIComponent(source)}`, { agent: true }).catch(() => null));
  }
  return messages.get(source);
}

function channels() {
  channelNames ||= api("/v1/channels", { agent: true })
    .then((found) => Object.fromEntries(found.map((c) => [c.id, c.name])))
    .catch(() => ({}));
  return channelNames;
}
