// Encore portal: times in the user's choice of zone. The server writes every time as UTC in
// <time datetime="…Z"> elements and labels it UTC; for a user who chose local time
// (<body data-time-zone="local">) this rewrites each time and each label in the browser's
// own zone, and says which. Without this script pages show UTC and say so.
"use strict";

(function () {
  function pad(n, width) { return String(n).padStart(width || 2, "0"); }

  function localText(date) {
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
      " " + pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()) +
      "." + pad(date.getMilliseconds(), 3);
  }

  function zoneName() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || "local"; }
    catch (error) { return "local"; }
  }

  function convert(root) {
    root.querySelectorAll("time[datetime]:not([data-local])").forEach(function (element) {
      const date = new Date(element.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      element.title = "UTC " + element.textContent;
      element.textContent = localText(date);
      element.setAttribute("data-local", "1");
    });
    const label = "local, " + zoneName();
    root.querySelectorAll(".tz").forEach(function (element) {
      if (element.textContent !== label) element.textContent = label;  // no mutation loop
    });
    // column headings written "(UTC)" by pages that name no .tz element
    root.querySelectorAll("th").forEach(function (th) {
      if (th.textContent.indexOf("(UTC)") >= 0 && !th.querySelector(".tz")) {
        th.textContent = th.textContent.replace("(UTC)", "(" + label + ")");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".browser-zone").forEach(function (e) { e.textContent = zoneName(); });
    if (document.body.getAttribute("data-time-zone") !== "local") return;
    convert(document);
    // lists refreshed by portal.js bring new UTC times: convert them as they come
    new MutationObserver(function () { convert(document); })
      .observe(document.body, {childList: true, subtree: true});
  });
})();
