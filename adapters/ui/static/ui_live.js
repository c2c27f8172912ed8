// The live view's running turns (docs/UI.md "The live view"): the page opens the
// /live/events stream named by #live-running's data-events, and shows each turn the
// service runs as it runs: a row per step, model call and tool call, the model's
// text appended to ONE growing block per model call (never a row per piece), in its
// place among the rows, and its end (status, tokens). A "stored" event (a turn committed, here or, on PostgreSQL, by
// any process) and a turn's end make the feed below be read at once; "lagged" says
// the page fell behind and missed events, and reads the feed too.
"use strict";

(function () {
  const section = document.getElementById("live-running");
  if (!section || !section.dataset.events || !window.EventSource) return;
  const runs = document.getElementById("live-runs");

  function refresh() {
    document.body.dispatchEvent(new Event("live-stored"));
  }

  function span(className, text) {
    const item = document.createElement("span");
    item.className = className;
    item.textContent = text;
    return item;
  }

  function entry(run) {
    let item = runs.querySelector("li[data-run='" + CSS.escape(run) + "']");
    if (item) return item;
    item = document.createElement("li");
    item.dataset.run = run;
    item.dataset.status = "running";
    const head = document.createElement("div");
    head.className = "live-head";
    head.appendChild(span("live-ids", run));
    head.appendChild(span("badge running", "running"));
    head.appendChild(span("live-tokens muted", ""));
    item.appendChild(head);
    const steps = document.createElement("ul");
    steps.className = "live-steps";
    item.appendChild(steps);
    runs.insertBefore(item, runs.firstChild);
    return item;
  }

  function onTurn(data) {
    const item = entry(data.run);
    const head = item.querySelector(".live-head");
    if (data.kind === "turn_started") {
      head.querySelector(".live-ids").textContent = data.org + " / " + data.user;
      return;
    }
    if (data.kind === "turn_identified") {
      head.querySelector(".live-ids").textContent += " · " + data.session + " · " + data.turn;
      item.dataset.turn = data.turn;
      return;
    }
    if (data.kind === "turn_ended") {
      const badge = head.querySelector(".badge");
      badge.className = "badge " + data.status;
      badge.textContent = data.status + (data.error ? " (" + data.error + ")" : "");
      item.dataset.status = data.status;
      if (data.turn) item.dataset.turn = data.turn;
      if (data.input_tokens !== null && data.input_tokens !== undefined) {
        head.querySelector(".live-tokens").textContent =
          data.input_tokens + " in / " + data.output_tokens + " out";
      }
      refresh();
      return;
    }
    if (data.kind === "model_call_started" && data.round !== undefined) {
      item.dataset.round = String(data.round); // the last call: an unstreamed answer goes there
    }
    const row = document.createElement("li");
    row.dataset.kind = data.kind;
    const words = [data.kind, data.step, data.name, data.tool_name, data.outcome, data.model];
    row.textContent = words.filter((w) => typeof w === "string" && w).join(" ");
    item.querySelector(".live-steps").appendChild(row);
  }

  // The block of the model call that wrote the text (its round; an unstreamed turn's
  // answer, round null, is its last call's), made under the rows so far when new.
  function onText(data) {
    const item = entry(data.run);
    const round = data.round === null || data.round === undefined
      ? item.dataset.round || "0" : String(data.round);
    let block = item.querySelector("pre.live-text[data-round='" + CSS.escape(round) + "']");
    if (!block) {
      const row = document.createElement("li");
      row.dataset.kind = "text";
      block = document.createElement("pre");
      block.className = "live-text";
      block.dataset.round = round;
      block.dataset.pieces = "0";
      row.appendChild(block);
      item.querySelector(".live-steps").appendChild(row);
    }
    block.textContent += data.text;
    block.dataset.pieces = String(Number(block.dataset.pieces) + 1);
  }

  const source = new EventSource(section.dataset.events);
  source.addEventListener("ready", () => {
    section.dataset.ready = "true";
  });
  source.addEventListener("turn", (event) => onTurn(JSON.parse(event.data)));
  source.addEventListener("text", (event) => onText(JSON.parse(event.data)));
  source.addEventListener("stored", refresh);
  source.addEventListener("lagged", () => {
    section.dataset.lagged = "true";
    refresh();
  });
})();
