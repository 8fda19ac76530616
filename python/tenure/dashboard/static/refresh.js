// Reload the page every data-refresh seconds while the box is ticked (remembered per browser).
(function () {
  var seconds = parseFloat(document.body.dataset.refresh || "0");
  var box = document.getElementById("auto-refresh");
  if (!seconds || !box) return;
  box.checked = localStorage.getItem("tenure-refresh") !== "off";
  box.addEventListener("change", function () { localStorage.setItem("tenure-refresh", box.checked ? "on" : "off"); });
  setInterval(function () { if (box.checked) location.reload(); }, seconds * 1000);
})();
