// The Moat console's one script: optional comfort only (every page reads and works without
// it). It counts down the time left of elements marked data-expires (an ISO time).
"use strict";
(function () {
  function left(until) {
    var seconds = Math.floor((Date.parse(until) - Date.now()) / 1000);
    if (!(seconds > 0)) { return "expired"; }
    var h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
    if (h) { return h + " h " + m + " min left"; }
    return m ? m + " min " + s + " s left" : s + " s left";
  }
  function tick() {
    var marked = document.querySelectorAll("[data-expires]");
    for (var i = 0; i < marked.length; i++) {
      marked[i].textContent = left(marked[i].getAttribute("data-expires"));
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (document.querySelector("[data-expires]")) { tick(); window.setInterval(tick, 1000); }
  });
})();
