// One writer run: what it read, what it did and how it ended (its record from the writer's state), with its
// review branch while it waits for review.
import { api } from "./api.js";
import { h, jsonBlock, link, timeEl } from "./dom.js";

export async function render(out, params) {
  out.append(h("h1", {}, "Writer run ", h("span", { class: "mono" }, params.run || "")));
  if (!params.target || !params.run) {
    out.append(h("p", { class: "muted" }, "Open a writer run from an item's provenance (State or Blame)."));
    return;
  }
  const [run, branches] = await Promise.all([api(`/v1/writer/${encodeURIComponent(params.target)}/runs/${encodeURIComponent(params.run)}`),
    api("/v1/branches")]);
  const review = `writer/${params.target}/${params.run}`;
  const actions = Array.isArray(run.actions) ? run.actions : null;
  out.append(h("dl", { class: "meta", id: "run" },
    h("dt", {}, "Target"), h("dd", {}, link("state", { ns: params.target }, params.target)),
    h("dt", {}, "Outcome"), h("dd", { id: "run-outcome" }, String(run.outcome ?? "—")),
    run.started_at ? [h("dt", {}, "Started"), h("dd", {}, timeEl(typeof run.started_at === "number" ? new Date(run.started_at).toISOString() : run.started_at))] : null,
    run.model ? [h("dt", {}, "Model"), h("dd", {}, String(run.model))] : null,
    run.commit ? [h("dt", {}, "Commit"), h("dd", {}, link("commit", { id: run.commit }, String(run.commit).slice(0, 10), { class: "mono" }))] : null,
    review in branches.refs ? [h("dt", {}, "Review"), h("dd", {}, link("branches", { compare: review }, "review its changes"))] : null,
    actions ? [h("dt", {}, "Actions"), h("dd", {}, h("ul", {}, actions.map((a) => h("li", {}, typeof a === "string" ? a : `${a.op || ""} ${a.key || ""}`.trim() || JSON.stringify(a)))))] : null));
  out.append(h("details", {}, h("summary", {}, "the run's record"), jsonBlock(run)));
}
