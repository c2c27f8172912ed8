// The path picture of the turn browser (docs/UI.md "A recorded turn"): zoom and pan.
// The picture starts at its actual size (not shrunk to the page's column), so the taken
// path reads at the page's width, scrolled to the path's first state; the toolbar's buttons zoom out, back to the
// actual size, to fit the width, and in; dragging pans. A state of the path is a link
// to its step in the timeline (``#step-N``), which the page's own navigation follows.
"use strict";

const ZOOM_STEP = 1.25;

function setupPicture(box) {
  const svg = box.querySelector("svg");
  const tools = box.previousElementSibling;
  if (!svg || !tools || !tools.classList.contains("picture-tools")) return;
  const width = svg.width.baseVal.value || svg.getBoundingClientRect().width;
  const height = svg.height.baseVal.value || svg.getBoundingClientRect().height;
  if (!svg.getAttribute("viewBox")) svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  let scale = 1;
  const apply = () => {
    svg.setAttribute("width", String(width * scale));
    svg.setAttribute("height", String(height * scale));
    box.dataset.zoom = scale.toFixed(3);
  };
  tools.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-zoom]");
    if (!button) return;
    const zoom = button.dataset.zoom;
    if (zoom === "in") scale *= ZOOM_STEP;
    else if (zoom === "out") scale /= ZOOM_STEP;
    else if (zoom === "actual") scale = 1;
    else if (zoom === "fit") scale = (box.clientWidth - 16) / width;
    apply();
  });
  let dragged = null;
  box.addEventListener("mousedown", (event) => {
    if (event.button !== 0 || event.target.closest("a")) return;
    dragged = { x: event.clientX, y: event.clientY, left: box.scrollLeft, top: box.scrollTop };
    box.classList.add("panning");
    event.preventDefault();
  });
  window.addEventListener("mousemove", (event) => {
    if (!dragged) return;
    box.scrollLeft = dragged.left - (event.clientX - dragged.x);
    box.scrollTop = dragged.top - (event.clientY - dragged.y);
  });
  window.addEventListener("mouseup", () => {
    dragged = null;
    box.classList.remove("panning");
  });
  apply();
  // Start where the taken path starts: its first state in view, a third from the left.
  const first = box.querySelector("a.path-state");
  if (first) {
    const at = first.getBoundingClientRect();
    const origin = svg.getBoundingClientRect();
    box.scrollLeft = at.left - origin.left - box.clientWidth / 3;
    box.scrollTop = at.top - origin.top - box.clientHeight / 3;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".picture").forEach(setupPicture);
});
