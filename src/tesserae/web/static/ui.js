// Dashboard behaviour: live regions re-rendered by the server and swapped in every few seconds,
// the job log tail, confirmation of dangerous forms, the usage charts and the cluster over time
// (uPlot, drawn by charts.js). No framework;
// nothing from the network but this server. User data only ever reaches the page as text nodes
// or as HTML the server rendered with escaping.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  function say(text) { if (status) status.textContent = text; }
  function toLogin() {
    location.href = "/ui/login?expired=1&next=" + encodeURIComponent(location.pathname + location.search);
  }

  function poll(el, every) {
    var url = el.getAttribute("data-live"), etag = null;
    function tick() {
      if (document.visibilityState === "hidden") { setTimeout(tick, every); return; }
      var headers = {"X-Tesserae-Live": "1"};
      if (etag) headers["If-None-Match"] = etag;  // a page with an ETag answers 304 while unchanged
      fetch(url, {headers: headers, credentials: "same-origin", cache: "no-store"})
        .then(function (r) {
          if (r.status === 401) { toLogin(); throw new Error("logged out"); }
          if (r.status === 304) return null;
          if (!r.ok) throw new Error("HTTP " + r.status);
          etag = r.headers.get("ETag");
          return r.text();
        })
        .then(function (html) {
          var focused = document.activeElement && el.contains(document.activeElement);
          if (html !== null && !focused) el.innerHTML = html;  // server-rendered and escaped
          say("updated " + window.TesseraeCharts.clock(Date.now() / 1000));
          setTimeout(tick, every);
        })
        .catch(function (e) { say("connection lost (" + e.message + "); retrying"); setTimeout(tick, every * 2); });
    }
    setTimeout(tick, every);
  }

  function tail(pre) {
    var base = pre.getAttribute("data-log"), offset = -1, note = document.getElementById("log-note");
    var limit = 400000;
    function tick() {
      fetch(base + "?offset=" + offset, {credentials: "same-origin", cache: "no-store"})
        .then(function (r) {
          if (r.status === 401) { toLogin(); throw new Error("logged out"); }
          return r.json().then(function (d) { if (!r.ok) throw new Error(d.detail || r.status); return d; });
        })
        .then(function (d) {
          var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          if (offset < 0 && d.truncated && note) note.textContent = "(the last part; the whole log: tesserae logs ID)";
          if (d.text) {
            pre.appendChild(document.createTextNode(d.text));
            if (pre.textContent.length > limit) pre.textContent = pre.textContent.slice(-limit / 2);
            if (atBottom) pre.scrollTop = pre.scrollHeight;
          }
          offset = d.next;
          var done = ["completed", "failed", "cancelled"].indexOf(d.state) >= 0;
          setTimeout(tick, d.text ? 500 : (done ? 5000 : 1000));
        })
        .catch(function (e) { if (note) note.textContent = "(" + e.message + ")"; setTimeout(tick, 3000); });
    }
    tick();
  }

  document.addEventListener("submit", function (ev) {
    var msg = ev.target.getAttribute && ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });

  function tidy(v) { return v == null ? "" : (Math.abs(v) >= 10 ? v.toFixed(0) : +v.toPrecision(2) + ""); }
  function getJSON(url) {
    return fetch(url, {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { if (r.status === 401) { toLogin(); throw new Error("logged out"); } return r.json(); });
  }
  function usage(box) {
    if (!window.uPlot) return;
    var C = window.TesseraeCharts, charts = {};
    var xSeries = {label: "time", value: function (u, v) { return v == null ? "-" : C.clock(v, true); }};
    function draw(id, data, series, yLabel, fmt, yRange) {
      var el = document.getElementById(id);
      if (charts[id]) { charts[id].setData(data); return; }
      var scales = {x: {time: true}};
      if (yRange) scales.y = {range: yRange};
      charts[id] = C.make({height: 260, series: [xSeries].concat(series),
                           axes: [C.timeAxis(""), {label: yLabel, values: function (u, vals) { return vals.map(fmt); }}],
                           scales: scales}, data, el);
    }
    function load() {
      getJSON(box.getAttribute("data-usage"))
        .then(function (u) {
          var x = u.bin_start.map(function (t) { return t + u.bin_seconds / 2; });
          var users = Object.keys(u.gpu_hours);
          var series = [], data = [x];
          users.forEach(function (name, i) {
            series.push({label: name, stroke: C.palette[i % C.palette.length], width: 2, points: {show: true, size: 4}});
            data.push(u.gpu_hours[name]);
          });
          if (!users.length) { series.push({label: "(nobody)", stroke: "#767676"}); data.push(x.map(function () { return 0; })); }
          if (charts["chart-users"] && charts["chart-users"].series.length !== series.length + 1) {
            charts["chart-users"].destroy(); delete charts["chart-users"];
          }
          draw("chart-users", data, series, "GPU-hours", tidy);
          draw("chart-util", [x, u.utilization.map(function (v) { return v == null ? null : 100 * v; })],
               [{label: "utilisation %", stroke: "#1a7d45", fill: "rgba(30,142,79,.12)", width: 2,
                 points: {show: true, size: 5}}], "%", tidy, [0, 100]);
          setTimeout(load, 15000);
        })
        .catch(function () { setTimeout(load, 15000); });
    }
    load();
  }

  // The cluster page's GPUs in use and jobs waiting over time.
  function history(box) {
    if (!window.uPlot) return;
    var chart = null;
    function load() {
      getJSON(box.getAttribute("data-history"))
        .then(function (h) {
          var runs = [{label: "cluster", t: h.t, gpus: h.gpus, queued: h.queued}];
          if (chart) chart.update(runs);
          else chart = window.TesseraeCharts.clusterOverTime(document.getElementById("history-gpus"),
            document.getElementById("history-queued"), runs, {time: true, capacity: h.total_gpus, height: 180,
            syncKey: "cluster", xLabel: ""});
          setTimeout(load, 15000);
        })
        .catch(function () { setTimeout(load, 15000); });
    }
    load();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(function (el) { poll(el, 2000); });
    document.querySelectorAll("pre[data-log]").forEach(tail);
    document.querySelectorAll("[data-usage]").forEach(usage);
    document.querySelectorAll("[data-history]").forEach(history);
  });
})();
