// The timeline's commit graph: lanes with lines joining each commit to its parents, like `engram log --graph`,
// one inline SVG per table row (aria-hidden: the table's text says which commits are merges and where refs are).
//
// The lanes are laid out here, in the browser, from each commit's `parents` (which /v1/timeline returns): the
// layout depends on what is on screen (pages appended one after another keep their lanes), so the API stays a
// plain list of commits any client can draw. The rule is the CLI's (engram/cli/_graph.py): a commit takes the
// lane waiting for it (a new lane on the right when none waits: a branch tip); its first parent then waits in that
// lane, and each further parent of a merge waits in the lane already waiting for it or in a new lane to its right.
// Lanes waiting for the same commit (where a branch forked) join at it.

const SVG = "http://www.w3.org/2000/svg";
export const LANE = 14; // px between lanes
const NODE = 16; // px from the row's top to the commit's dot (the middle of the first line of text)
const COLOURS = 4; // lane colours: .lane-0 ... .lane-3 in app.css

/** Lane state carried from row to row (and from page to page). */
export class Graph {
  constructor() {
    this.lanes = []; // the commit ids waiting, left to right
  }

  /** Lay out one commit (in log order: every commit before its parents) and return its row's drawing. */
  add(commit) {
    const before = this.lanes;
    const into = [];
    before.forEach((id, i) => { if (id === commit.id) into.push(i); });
    const col = into.length ? into[0] : before.length;
    const after = []; // {id, from: lane index before this row (pass-through), own: opened by this commit}
    for (let i = 0; i <= before.length; i++) {
      if (i === col) {
        commit.parents.forEach((parent, k) => {
          const waiting = before.some((id, j) => id === parent && !into.includes(j)) || after.some((e) => e.id === parent);
          if (k === 0 || !waiting) after.push({ id: parent, own: true });
        });
      }
      if (i < before.length && before[i] !== commit.id) after.push({ id: before[i], from: i });
    }
    this.lanes = after.map((e) => e.id);
    const down = commit.parents.map((parent) => {
      const own = after.findIndex((e) => e.own && e.id === parent);
      return own >= 0 ? own : after.findIndex((e) => e.id === parent);
    });
    return {
      col,
      width: Math.max(before.length, after.length, col + 1),
      into, // lanes (before) that end at this commit
      through: after.flatMap((e, to) => (e.from === undefined ? [] : [[e.from, to]])),
      down, // lanes (after) the commit's parents wait in
      merge: commit.parents.length > 1,
    };
  }
}

const x = (lane) => LANE / 2 + lane * LANE;

function line(x1, y1, x2, y2, lane) {
  const el = document.createElementNS(SVG, "line");
  for (const [name, value] of Object.entries({ x1, y1, x2, y2 })) el.setAttribute(name, String(value));
  el.setAttribute("class", `lane-${lane % COLOURS}`);
  return el;
}

/** The row's SVG: lines in from the row above, the commit's dot, lines out to the row below. */
export function drawRow(row) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.setAttribute("class", "lanes");
  svg.setAttribute("width", String(row.width * LANE));
  svg.dataset.lanes = String(row.width);
  for (const [from, to] of row.through) svg.append(line(x(from), 0, x(to), "100%", to));
  for (const lane of row.into) svg.append(line(x(lane), 0, x(row.col), NODE, lane));
  for (const lane of row.down) {
    const edge = line(x(row.col), NODE, x(lane), "100%", lane);
    edge.dataset.parent = "";
    svg.append(edge);
  }
  const dot = document.createElementNS(SVG, "circle");
  dot.setAttribute("cx", String(x(row.col)));
  dot.setAttribute("cy", String(NODE));
  dot.setAttribute("r", row.merge ? "5" : "4");
  dot.setAttribute("class", `node lane-${row.col % COLOURS}${row.merge ? " merge" : ""}`);
  svg.append(dot);
  return svg;
}
