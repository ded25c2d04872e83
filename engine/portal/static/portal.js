// Encore portal: confirmation of actions, refresh of the production page, event follow.
// Pages work without this script; it only asks before actions and keeps lists fresh.
"use strict";

// Every action form asks first; the answer travels as confirmed=yes (the server asks on a
// page of its own when it is missing).
document.addEventListener("submit", function (event) {
  const form = event.target;
  const question = form.getAttribute("data-confirm");
  if (!question) return;
  if (!window.confirm(question)) {
    event.preventDefault();
    return;
  }
  const field = form.querySelector("input[name=confirmed]");
  if (field) field.value = "yes";
}, true);

async function fetchText(url) {
  const response = await fetch(url, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}});
  if (!response.ok || response.redirected) throw new Error("HTTP " + response.status);
  return response.text();
}

// <div data-refresh="URL" data-every="S">: replaced by URL's fragment every S seconds.
function startRefresh(element) {
  const every = Number(element.getAttribute("data-every") || "5") * 1000;
  setInterval(async function () {
    try {
      element.innerHTML = await fetchText(element.getAttribute("data-refresh"));
    } catch (error) { /* keep what is shown; try again next time */ }
  }, every);
}

// The event log's follow switch: new rows (newer than the newest shown) on top every 2 s.
function startFollow(table) {
  const box = document.getElementById("follow");
  const rows = document.getElementById("event-rows");
  let timer = null;
  async function poll() {
    const newest = rows.querySelector("tr[data-event-row]");
    const after = newest ? newest.getAttribute("data-event-row") : "0";
    try {
      const html = await fetchText(table.getAttribute("data-follow") + "&after=" + after);
      if (html.trim()) rows.insertAdjacentHTML("afterbegin", html);
    } catch (error) { /* try again next time */ }
  }
  function toggle() {
    if (box.checked && timer === null) timer = setInterval(poll, 2000);
    if (!box.checked && timer !== null) { clearInterval(timer); timer = null; }
  }
  box.addEventListener("change", toggle);
  toggle();
}

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-refresh]").forEach(startRefresh);
  const table = document.getElementById("event-table");
  if (table && document.getElementById("follow")) startFollow(table);
});
