// Charts shared by the simulator's report (report.js) and the dashboard (ui.js): the cluster over
// time (GPUs in use and jobs waiting, two step plots with one cursor) and 24-hour time labels. uPlot
// draws them; every chart takes its box's width, with no minimum, and follows it when it changes.
(function () {
  "use strict";
  var palette = ["#2f6fdb", "#e0703a", "#1e8e4f", "#b03a8c", "#8a6d00", "#0f8a9e", "#6a4fc4", "#c0392b", "#566573",
                 "#2e86c1", "#d68910", "#148f77"];
  function two(n) { return (n < 10 ? "0" : "") + n; }
  // Wall-clock times, always 24-hour (the server's pages write times the same way).
  function clock(ts, withDate) {
    var d = new Date(ts * 1000);
    var hm = two(d.getHours()) + ":" + two(d.getMinutes());
    if (withDate) return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " + hm;
    return hm + ":" + two(d.getSeconds());
  }
  // Axis labels of a time scale: hours and minutes, with the date when the span passes a day.
  function timeAxis(label) {
    return {label: label, values: function (u, vals) {
      var span = vals.length > 1 ? vals[vals.length - 1] - vals[0] : 0;
      return vals.map(function (v) {
        var s = clock(v, span > 86400);
        return span > 86400 ? s.slice(5) : span > 600 ? s.slice(0, 5) : s;  // seconds on spans under 10 min
      });
    }};
  }
  function widthOf(el) { return Math.max(200, el.clientWidth || (el.parentNode && el.parentNode.clientWidth) || 300); }
  // Keep a chart as wide as its box.
  function follow(chart, el) {
    if (!window.ResizeObserver) return;
    var last = widthOf(el);
    new ResizeObserver(function () {
      var w = widthOf(el);
      if (Math.abs(w - last) > 2) { last = w; chart.setSize({width: w, height: chart.height}); }
    }).observe(el);
  }
  function make(opts, data, el) {
    opts.width = widthOf(el);
    var chart = new uPlot(opts, data, el);
    follow(chart, el);
    return chart;
  }
  // GPUs in use and jobs waiting of one or more runs: runs [{label, t, gpus, queued}], into
  // the boxes gpusEl and queuedEl. o.time: t is Unix seconds (else hours); o.capacity: the
  // cluster's GPUs, drawn as a dashed line. Returns {update(runs)} for the same labels.
  function clusterOverTime(gpusEl, queuedEl, runs, o) {
    var sync = uPlot.sync(o.syncKey || "timeline");
    var charts = [];
    [[gpusEl, "gpus", "GPUs in use"], [queuedEl, "queued", "jobs waiting"]].forEach(function (spec) {
      var xSeries = o.time ? {label: "time", value: function (u, v) { return v == null ? "-" : clock(v, true); }}
                           : {label: "time (h)", value: function (u, v) { return v == null ? "-" : +v.toPrecision(4) + " h"; }};
      var series = [xSeries];
      runs.forEach(function (r, i) {
        series.push({label: r.label, stroke: palette[i % palette.length], width: 1.4, spanGaps: true, points: {show: false},
                     fill: runs.length === 1 ? "rgba(47,111,219,.10)" : undefined,
                     paths: uPlot.paths.stepped({align: 1})});
      });
      var opts = {height: o.height || 230, series: series, scales: {x: {time: !!o.time}},
                  cursor: {sync: {key: sync.key}},
                  axes: [o.time ? timeAxis(o.xLabel || "time") : {label: o.xLabel || "simulated time (hours)"},
                         {label: spec[2]}]};
      if (spec[1] === "gpus" && o.capacity) {
        opts.hooks = {draw: [function (u) {
          var y = u.valToPos(o.capacity, "y", true), ctx = u.ctx;
          ctx.save(); ctx.strokeStyle = "#767676"; ctx.setLineDash([4, 4]); ctx.beginPath();
          ctx.moveTo(u.bbox.left, y); ctx.lineTo(u.bbox.left + u.bbox.width, y); ctx.stroke(); ctx.restore();
        }]};
        opts.scales.y = {range: function (u, lo, hi) { return [0, Math.max(hi, o.capacity) * 1.05]; }};
      } else {
        opts.scales.y = {range: function (u, lo, hi) { return [0, Math.max(hi, 1) * 1.1]; }};
      }
      charts.push([make(opts, table(runs, spec[1]), spec[0]), spec[1]]);
    });
    function table(rs, key) { return uPlot.join(rs.map(function (r) { return [r.t, r[key]]; })); }
    return {update: function (rs) { charts.forEach(function (c) { c[0].setData(table(rs, c[1])); }); }};
  }
  window.TesseraeCharts = {palette: palette, clock: clock, timeAxis: timeAxis, make: make, clusterOverTime: clusterOverTime};
})();
