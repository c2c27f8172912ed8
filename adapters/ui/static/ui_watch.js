// The watch view of the turn browser (docs/UI.md "Watching a turn"): the request in the
// form is sent to the UI's watch/run route, which answers with the service's own
// Server-Sent Events (progress, delta, result). Each event is read from the response
// body as it arrives and added to the list, except the model's text: its deltas are
// appended to one growing block (the list's "text" item, made at the first delta and
// begun anew after any other event), so a reply reads as text, not a row per chunk.
// The result ends it.
"use strict";

function appendText(list, text) {
  let item = list.lastElementChild;
  if (!item || item.dataset.event !== "text") {
    item = document.createElement("li");
    item.className = "kind-text";
    item.dataset.event = "text";
    item.dataset.deltas = "0";
    const kind = document.createElement("span");
    kind.className = "kind";
    kind.textContent = "text";
    item.appendChild(kind);
    const block = document.createElement("pre");
    block.className = "watch-text";
    item.appendChild(block);
    list.appendChild(item);
  }
  item.dataset.deltas = String(Number(item.dataset.deltas) + 1);
  item.lastElementChild.textContent += text;
}

function addEvent(list, name, data) {
  if (name === "delta") {
    try {
      const value = JSON.parse(data);
      if (typeof value.text === "string") {
        appendText(list, value.text);
        return;
      }
    } catch (error) {
      // not JSON: shown as a row of its own below
    }
  }
  const item = document.createElement("li");
  item.className = "kind-" + name;
  item.dataset.event = name;
  const kind = document.createElement("span");
  kind.className = "kind";
  kind.textContent = name;
  item.appendChild(kind);
  let text = data;
  try {
    const value = JSON.parse(data);
    if (name === "progress") {
      text = [value.kind, value.step, value.outcome].filter(Boolean).join(" ");
    } else if (name === "delta") {
      text = value.text !== undefined ? value.text : JSON.stringify(value);
    } else {
      text = JSON.stringify(value, null, 2);
    }
  } catch (error) {
    text = data;
  }
  const body = document.createElement(name === "result" ? "pre" : "span");
  body.textContent = text;
  item.appendChild(body);
  list.appendChild(item);
}

function parseBlock(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  return data.length ? { name, data: data.join("\n") } : null;
}

async function watch(form) {
  const list = document.getElementById("events");
  const result = document.getElementById("watch-result");
  list.replaceChildren();
  result.textContent = "";
  const response = await fetch(form.dataset.action, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
    body: document.getElementById("watch-request").value,
  });
  const type = response.headers.get("content-type") || "";
  if (!type.startsWith("text/event-stream")) {
    result.dataset.status = String(response.status);
    const pre = document.createElement("pre");
    pre.textContent = response.status + " " + (await response.text());
    result.appendChild(pre);
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = parseBlock(buffered.slice(0, end));
      buffered = buffered.slice(end + 2);
      if (event) addEvent(list, event.name, event.data);
    }
  }
  result.dataset.status = "done";
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("watch-form");
  if (!form) return;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    watch(form).catch((error) => {
      document.getElementById("watch-result").textContent = String(error);
    });
  });
});
