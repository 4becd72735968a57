package replay

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// WriteHTML writes the replay report as one self-contained page (inline
// CSS and SVG, no script, no external assets) laid out for a 1000 px wide
// window: the summary, outcomes per tenant and class over time, the
// slowest placements with measured and predicted breakdowns, a what-if's
// change in outcomes, divergences and placements by worker.
func WriteHTML(w io.Writer, r Report) error {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>Switchyard replay</title><style>` +
		`body{font:14px system-ui,sans-serif;margin:1.5em;max-width:960px;color:#111}h2{margin-top:1.6em}` +
		`table{border-collapse:collapse;font-size:12px;max-width:100%}td,th{padding:2px 6px;border-bottom:1px solid #ddd;text-align:right;vertical-align:top}` +
		`th{background:#f4f4f4;font-weight:600}td.l,th.l{text-align:left}.wrap{max-width:100%;overflow-x:auto}.note{color:#555;font-size:12px;max-width:900px}` +
		`.key span{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px}code{font-size:11px;word-break:break-all}</style></head><body>`)
	b.WriteString("<h1>Switchyard replay</h1>")
	fmt.Fprintf(&b, "<p>Policy <b>%s</b> (recorded %s). Window %s. Requests %d, decisions %d, <b>divergent %d</b>, sheds %d, breaker trips %d.",
		esc(r.Policy), esc(r.RecordedPolicy), esc(windowText(r)), r.Requests, r.Decisions, r.Divergent, r.Sheds, r.BreakerTrips)
	if r.Unresolved > 0 {
		fmt.Fprintf(&b, " %d journaled admissions could not be replayed: the ADMITTED stream no longer holds them.", r.Unresolved)
	}
	b.WriteString("</p>")

	writeSeries(&b, r)
	writeSlowest(&b, r)
	if r.WhatIf != nil {
		writeWhatIf(&b, r.WhatIf)
	}
	if c := r.Calibration; c != nil {
		fmt.Fprintf(&b, "<h2>Prediction calibration</h2><p>For %d requests that finished ok under the recorded policy, the router predicted a mean completion of %.3f s from placement; the results measured %.3f s (mean absolute error %.3f s).</p>",
			c.Compared, c.MeanPredictedS, c.MeanMeasuredS, c.MeanAbsErrorS)
	}

	b.WriteString("<h2>Divergences</h2>")
	if len(r.Divergences) == 0 {
		b.WriteString("<p>None: replay reproduced every recorded decision.</p>")
	} else {
		fmt.Fprintf(&b, "<p>%d requests decided differently; the first %d:</p><div class=\"wrap\"><table><tr><th class=\"l\">request</th><th class=\"l\">recorded</th><th class=\"l\">replayed</th></tr>", r.Divergent, len(r.Divergences))
		for _, d := range r.Divergences {
			fmt.Fprintf(&b, "<tr><td class=\"l\"><code>%s</code></td><td class=\"l\">%s</td><td class=\"l\">%s</td></tr>", esc(d.ID), esc(describeDecision(d.Recorded)), esc(describeDecision(d.Replayed)))
		}
		b.WriteString("</table></div>")
	}

	b.WriteString("<h2>Placements by worker</h2><div class=\"wrap\"><table><tr><th class=\"l\">worker</th><th>recorded</th><th>replayed</th></tr>")
	workers := map[string]bool{}
	for k := range r.RecordedByWorker {
		workers[k] = true
	}
	for k := range r.ReplayedByWorker {
		workers[k] = true
	}
	for _, k := range sortedKeys(workers) {
		fmt.Fprintf(&b, "<tr><td class=\"l\">%s</td><td>%d</td><td>%d</td></tr>", esc(k), r.RecordedByWorker[k], r.ReplayedByWorker[k])
	}
	b.WriteString("</table></div></body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func windowText(r Report) string {
	f := func(t time.Time, empty string) string {
		if t.IsZero() {
			return empty
		}
		return t.UTC().Format(time.RFC3339)
	}
	return f(r.Since, "from the journal's start") + " to " + f(r.Until, "now")
}

func describeDecision(d *Decision) string {
	if d == nil {
		return "(no decision)"
	}
	if d.Kind != "placed" {
		return "failed " + d.Code
	}
	s := "placed on " + d.Worker
	if d.Infeasible != "" {
		return s + ", infeasible: " + d.Infeasible
	}
	if p := d.Predicted; p != nil {
		s += fmt.Sprintf(", predicted completion %.3f s", p.CompletionS)
		if p.SlackS != nil {
			s += fmt.Sprintf(", slack %.3f s", *p.SlackS)
		}
	}
	return s
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Outcome colours: SLO met, ok but late, shed, rejected, failed.
var outcomeColours = [...]string{"#16a34a", "#eab308", "#f97316", "#9ca3af", "#dc2626"}

func writeSeries(b *strings.Builder, r Report) {
	b.WriteString("<h2>Outcomes by tenant and class over time</h2>")
	if len(r.Series) == 0 {
		b.WriteString("<p>No final results in the window.</p>")
		return
	}
	fmt.Fprintf(b, "<p class=\"note\">Each bar is %s of final results, by when they were published; all rows share one scale.</p>", r.Bucket)
	b.WriteString(`<p class="key">`)
	for i, n := range []string{"SLO met", "ok, late", "shed", "rejected", "failed"} {
		fmt.Fprintf(b, `<span style="background:%s"></span>%s`, outcomeColours[i], n)
	}
	b.WriteString("</p>")
	peak := 1
	for _, s := range r.Series {
		for _, p := range s.Points {
			peak = max(peak, p.Requests)
		}
	}
	b.WriteString(`<div class="wrap"><table><tr><th class="l">tenant</th><th class="l">class</th><th>requests</th><th>SLO attain.</th><th class="l">over time</th><th>worst p95 ms</th></tr>`)
	for _, s := range r.Series {
		worst := 0.0
		for _, p := range s.Points {
			worst = math.Max(worst, p.P95Ms)
		}
		fmt.Fprintf(b, `<tr><td class="l">%s</td><td class="l">%s</td><td>%d</td><td>%.3f</td><td class="l">`,
			html.EscapeString(s.Tenant), html.EscapeString(s.Class), s.Requests, s.SLOAttainment)
		sparkBars(b, s, peak, r.Bucket)
		fmt.Fprintf(b, "</td><td>%.0f</td></tr>", worst)
	}
	b.WriteString("</table></div>")
	attainmentChart(b, r.Series)
}

// sparkBars draws one series as stacked bars, one per bucket, with a
// tooltip per bar.
func sparkBars(b *strings.Builder, s Series, peak int, bucket time.Duration) {
	const w, h = 420.0, 34.0
	n := len(s.Points)
	bw := w / float64(max(n, 1))
	fmt.Fprintf(b, `<svg width="%g" height="%g" viewBox="0 0 %g %g" xmlns="http://www.w3.org/2000/svg" role="img">`, w, h, w, h)
	for i, p := range s.Points {
		parts := [...]int{p.SLOMet, p.OK - p.SLOMet, p.Shed, p.Rejected, p.Failed}
		y := h
		x := float64(i) * bw
		fmt.Fprintf(b, `<g><title>%s +%s: %d requests, %d SLO met, %d late, %d shed, %d rejected, %d failed, p95 %.0f ms</title>`,
			p.Start.UTC().Format("15:04:05"), bucket, p.Requests, p.SLOMet, p.OK-p.SLOMet, p.Shed, p.Rejected, p.Failed, p.P95Ms)
		for k, c := range parts {
			if c <= 0 {
				continue
			}
			ph := float64(c) / float64(peak) * (h - 2)
			y -= ph
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x, y, math.Max(bw-1, 0.5), ph, outcomeColours[k])
		}
		b.WriteString("</g>")
	}
	b.WriteString("</svg>")
}

var seriesPalette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// attainmentChart plots each series' SLO attainment per bucket (buckets
// without results leave a gap), y labels at least 14 px apart and x
// labels at least 80 px apart so none overlap.
func attainmentChart(b *strings.Builder, ss []Series) {
	const W, H, padL, padR, padT, padB = 900.0, 260.0, 44.0, 190.0, 10.0, 34.0
	plotW, plotH := W-padL-padR, H-padT-padB
	n := len(ss[0].Points)
	px := func(i int) float64 {
		if n <= 1 {
			return padL + plotW/2
		}
		return padL + float64(i)/float64(n-1)*plotW
	}
	py := func(v float64) float64 { return padT + (1-v)*plotH }
	b.WriteString("<h3>SLO attainment per bucket</h3><p>Lines are drawn up to 6 px apart and dashed differently so that series at the same value (all at 1.0, say) stay visible; hover a point for its exact value.</p>")
	fmt.Fprintf(b, `<svg width="%g" height="%g" viewBox="0 0 %g %g" xmlns="http://www.w3.org/2000/svg" role="img">`, W, H, W, H)
	fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#000"/><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#000"/>`,
		padL, padT+plotH, padL+plotW, padT+plotH, padL, padT, padL, padT+plotH)
	for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(b, `<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%g" y="%.1f" font-size="10" text-anchor="end" class="ylabel">%g</text>`,
			padL, padL+plotW, py(v), py(v), padL-4, py(v)+3, v)
	}
	last := math.Inf(-1)
	for i, p := range ss[0].Points {
		if x := px(i); x-last >= 80 {
			fmt.Fprintf(b, `<text x="%.1f" y="%g" font-size="10" text-anchor="middle">%s</text>`, x, padT+plotH+14, p.Start.UTC().Format("15:04:05"))
			last = x
		}
	}
	fmt.Fprintf(b, `<text x="%g" y="%g" font-size="11" text-anchor="middle">time (UTC)</text>`, padL+plotW/2, H-4)
	// Series often share a value (every class at 1.0): each is drawn a
	// pixel or two apart, and dashed differently, so none hides another.
	step := math.Min(2, 12/math.Max(1, float64(len(ss)-1)))
	dashes := []string{"", "6 3", "2 2", "8 2 2 2"}
	for k, s := range ss {
		col := seriesPalette[k%len(seriesPalette)]
		dy := (float64(k) - float64(len(ss)-1)/2) * step
		dash := dashes[(k/len(seriesPalette)+k)%len(dashes)]
		py := func(v float64) float64 { return py(v) + dy }
		var pts strings.Builder
		flush := func() {
			if pts.Len() > 0 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="%s" points="%s"/>`, col, dash, strings.TrimSpace(pts.String()))
				pts.Reset()
			}
		}
		for i, p := range s.Points {
			if p.Requests == 0 {
				flush()
				continue
			}
			v := float64(p.SLOMet) / float64(p.Requests)
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(i), py(v))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"><title>%s %s %s: %.3f of %d</title></circle>`,
				px(i), py(v), col, html.EscapeString(s.Tenant), html.EscapeString(s.Class), p.Start.UTC().Format("15:04:05"), v, p.Requests)
		}
		flush()
		if k < 14 {
			fmt.Fprintf(b, `<rect x="%g" y="%g" width="10" height="10" fill="%s"/><text x="%g" y="%g" font-size="11">%s</text>`,
				W-padR+14, padT+float64(k)*16, col, W-padR+28, padT+9+float64(k)*16, html.EscapeString(trim(s.Tenant, 14)+" / "+s.Class))
		}
	}
	b.WriteString("</svg>")
}

func trim(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func writeSlowest(b *strings.Builder, r Report) {
	b.WriteString("<h2>Slowest placements</h2>")
	if len(r.Slowest) == 0 {
		b.WriteString("<p>No placed request finished in the window.</p>")
		return
	}
	b.WriteString(`<p class="note">Measured from the results: queue (admission to placement), to first token (weights, worker queue, prefill), decode. Predicted: the router's terms when it placed the request (recorded policy).</p><p class="key">`)
	for i, n := range []string{"queue", "to first token", "decode"} {
		fmt.Fprintf(b, `<span style="background:%s"></span>%s`, breakdownColours[i], n)
	}
	b.WriteString(`</p><div class="wrap"><table><tr><th class="l">request</th><th class="l">tenant / class</th><th class="l">worker</th><th class="l">measured</th><th>total ms</th><th>tokens in / cached / out</th><th>pred. queue s</th><th>pred. prefill s</th><th>pred. decode s</th><th>pred. total s</th><th>SLO</th></tr>`)
	worst := r.Slowest[0].TotalMs
	for _, s := range r.Slowest {
		fmt.Fprintf(b, `<tr><td class="l"><code>%s</code></td><td class="l">%s / %s</td><td class="l">%s (%s)</td><td class="l">`,
			html.EscapeString(trim(s.ID, 28)), html.EscapeString(s.Tenant), html.EscapeString(s.Class), html.EscapeString(s.Worker), html.EscapeString(s.GPU))
		breakdownBar(b, s, worst)
		fmt.Fprintf(b, "</td><td>%.0f</td><td>%d / %d / %d</td>", s.TotalMs, s.PromptTokens, s.CachedTokens, s.CompletionTokens)
		if p := s.Predicted; p != nil {
			fmt.Fprintf(b, "<td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td>", p.QueueS, p.LoadS+p.PrefillS, p.DecodeS, p.CompletionS)
		} else {
			b.WriteString(`<td colspan="4">not in the journal</td>`)
		}
		met := "missed"
		if s.SLOMet {
			met = "met"
		}
		fmt.Fprintf(b, "<td>%s</td></tr>", met)
	}
	b.WriteString("</table></div>")
}

var breakdownColours = [...]string{"#f59e0b", "#3b82f6", "#8b5cf6"}

func breakdownBar(b *strings.Builder, s SlowRequest, worst float64) {
	const w, h = 200.0, 12.0
	fmt.Fprintf(b, `<svg width="%g" height="%g" viewBox="0 0 %g %g" xmlns="http://www.w3.org/2000/svg" role="img"><title>queue %.0f ms, to first token %.0f ms, decode %.0f ms</title>`,
		w, h, w, h, s.QueueMs, s.PrefillMs, s.DecodeMs)
	x := 0.0
	for i, v := range []float64{s.QueueMs, s.PrefillMs, s.DecodeMs} {
		if v <= 0 || worst <= 0 {
			continue
		}
		pw := v / worst * w
		fmt.Fprintf(b, `<rect x="%.1f" y="0" width="%.1f" height="%g" fill="%s"/>`, x, pw, h, breakdownColours[i])
		x += pw
	}
	b.WriteString("</svg>")
}

func writeWhatIf(b *strings.Builder, wi *WhatIf) {
	b.WriteString("<h2>What the what-if changed</h2>")
	fmt.Fprintf(b, `<p class="note">%s</p>`, html.EscapeString(wi.Basis))
	fmt.Fprintf(b, "<p>%d requests decided by both; %d placed on a different worker; predicted SLO outcome changed for %d (met→missed %d, missed→met %d).</p>",
		wi.Compared, wi.Moved, wi.MetToMissed+wi.MissedToMet, wi.MetToMissed, wi.MissedToMet)
	rec, alt := wi.Recorded, wi.Replayed
	fmt.Fprintf(b, `<div class="wrap"><table><tr><th class="l"></th><th>%s (recorded)</th><th>%s (what-if)</th></tr>`, html.EscapeString(rec.Policy), html.EscapeString(alt.Policy))
	row := func(name, a, c string) {
		fmt.Fprintf(b, `<tr><td class="l">%s</td><td>%s</td><td>%s</td></tr>`, name, a, c)
	}
	row("placed", fmt.Sprint(rec.Placed), fmt.Sprint(alt.Placed))
	row("failed", fmt.Sprint(rec.Failed), fmt.Sprint(alt.Failed))
	row("predicted to meet the deadline", fmt.Sprint(rec.PredictedSLOMet), fmt.Sprint(alt.PredictedSLOMet))
	row("placements the cost model would refuse", fmt.Sprint(rec.Infeasible), fmt.Sprint(alt.Infeasible))
	row("mean predicted completion (s)", fmt.Sprintf("%.3f", rec.MeanCompletionS), fmt.Sprintf("%.3f", alt.MeanCompletionS))
	row("predicted GPU cost ($)", fmt.Sprintf("%.5f", rec.GPUUSD), fmt.Sprintf("%.5f", alt.GPUUSD))
	row("workers used", fmt.Sprint(len(rec.ByWorker)), fmt.Sprint(len(alt.ByWorker)))
	b.WriteString("</table></div>")
	if len(wi.Changes) == 0 {
		return
	}
	b.WriteString(`<h3>Requests it changed most</h3><div class="wrap"><table><tr><th class="l">request</th><th class="l">tenant / class</th><th class="l">recorded</th><th class="l">what-if</th><th>Δ completion s</th><th class="l">outcome</th></tr>`)
	for _, c := range wi.Changes {
		fmt.Fprintf(b, `<tr><td class="l"><code>%s</code></td><td class="l">%s / %s</td><td class="l">%s</td><td class="l">%s</td><td>%+.3f</td><td class="l">%s</td></tr>`,
			html.EscapeString(trim(c.ID, 28)), html.EscapeString(c.Tenant), html.EscapeString(c.Class),
			html.EscapeString(describeDecision(&c.Recorded)), html.EscapeString(describeDecision(&c.Replayed)), c.DeltaCompletionS, html.EscapeString(c.SLOChange))
	}
	b.WriteString("</table></div>")
}
