// Reload the page every data-refresh seconds while the box is ticked (remembered per browser).
// While pages are slow or the dashboard is busy (503), wait longer: the next reload comes
// after the refresh interval times a back-off factor that doubles (up to 16) after a page
// that took more than half the interval or a busy page, and is back to 1 after a quick one.
(function () {
  var seconds = parseFloat(document.body.dataset.refresh || "0");
  var box = document.getElementById("auto-refresh");
  if (!seconds || !box) return;
  box.checked = localStorage.getItem("tenure-refresh") !== "off";
  box.addEventListener("change", function () { localStorage.setItem("tenure-refresh", box.checked ? "on" : "off"); });
  var timing = performance.getEntriesByType && performance.getEntriesByType("navigation")[0];
  var took = timing ? (timing.responseEnd - timing.startTime) / 1000 : 0;
  var factor = parseFloat(sessionStorage.getItem("tenure-backoff") || "1");
  if (document.body.dataset.busy || took > seconds / 2) factor = Math.min(factor * 2, 16);
  else factor = 1;
  sessionStorage.setItem("tenure-backoff", String(factor));
  document.body.dataset.nextReload = String(seconds * factor);
  setTimeout(function tick() {
    if (box.checked) location.reload();
    else setTimeout(tick, seconds * 1000);
  }, seconds * factor * 1000);
})();
