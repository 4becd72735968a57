package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
)

// SweepPoint is every policy's result at one rate scale.
type SweepPoint struct {
	Scale   float64   `json:"rate_scale"`
	Results []*Result `json:"policies"`
}

// Capacity is the highest swept rate scale at which a policy still met
// target SLO attainment, and its goodput per GPU-hour there (0 when it
// never did).
func Capacity(sweep []SweepPoint, policy string, target float64) (scale, goodputPerGPUHour float64) {
	for _, p := range sweep {
		for _, r := range p.Results {
			if r.Name == policy && r.SLOAttainment >= target && p.Scale > scale {
				scale, goodputPerGPUHour = p.Scale, r.GoodputPerGPUHour
			}
		}
	}
	return scale, goodputPerGPUHour
}

// Report is everything the HTML page shows.
type Report struct {
	Title   string
	Command string
	Rules   []string
	Results []*Result
	Sweep   []SweepPoint
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"}

// WriteHTML writes a self-contained report: tables, the assignment rules,
// and inline SVG charts (TTFT and ITL CDFs, SLO attainment against load from
// the sweep, cost per success by policy). No external assets.
func WriteHTML(w io.Writer, rep Report) error {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><title>%s</title>", esc(rep.Title))
	// Laid out for a 1000 px window: the results table has 15 columns, so
	// it is set small with headers that wrap, and wide content scrolls in
	// its own box rather than widening the page.
	b.WriteString(`<style>body{font:14px system-ui,sans-serif;margin:1.5em;max-width:960px}table{border-collapse:collapse;font-size:12px;max-width:100%}td,th{border:1px solid #ccc;padding:2px 4px;text-align:right}th{background:#f4f4f4;font-weight:600}td:first-child{text-align:left;white-space:nowrap}pre{background:#f8f8f8;padding:1em;white-space:pre-wrap;word-break:break-all}svg{margin:1em 0;background:#fff;max-width:100%}.wrap{max-width:100%;overflow-x:auto}</style></head><body>`)
	fmt.Fprintf(&b, "<h1>%s</h1>", esc(rep.Title))
	if rep.Command != "" {
		fmt.Fprintf(&b, "<pre>%s</pre>", esc(rep.Command))
	}
	b.WriteString(`<h2>Results</h2><div class="wrap"><table><tr><th>policy</th><th>requests</th><th>SLO attain.</th><th>tasks ok</th><th>goodput rps</th><th>goodput / GPU-h</th><th>$ / success</th><th>TTFT p50 ms</th><th>TTFT p99 ms</th><th>ITL p50 ms</th><th>ITL p99 ms</th><th>prefix hit</th><th>shed</th><th>failed</th><th>wasted GPU-s</th></tr>`)
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td>%.3f</td><td>%d/%d</td><td>%.3f</td><td>%.1f</td><td>%.5f</td><td>%.0f</td><td>%.0f</td><td>%.1f</td><td>%.1f</td><td>%.3f</td><td>%d</td><td>%d</td><td>%.0f</td></tr>",
			esc(r.Name), r.Requests, r.SLOAttainment, r.TasksSucceeded, r.Tasks, r.GoodputRPS, r.GoodputPerGPUHour, r.CostPerSuccessUSD,
			r.TTFTP50ms, r.TTFTP99ms, r.ITLP50ms, r.ITLP99ms, r.PrefixHitRate, r.Shed, r.Failed, r.WastedGPUSeconds)
	}
	b.WriteString(`</table></div><h3>SLO attainment by priority class</h3><div class="wrap"><table><tr><th>policy</th>`)
	classes := classNames(rep.Results)
	for _, c := range classes {
		fmt.Fprintf(&b, "<th>%s</th>", esc(c))
	}
	b.WriteString("</tr>")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "<tr><td>%s</td>", esc(r.Name))
		for _, c := range classes {
			cr := r.ByPriority[c]
			fmt.Fprintf(&b, "<td>%.3f (%d shed)</td>", cr.SLOAttainment, cr.Shed)
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table></div>")

	b.WriteString("<h2>TTFT CDF</h2>")
	cdf(&b, rep.Results, func(r *Result) []float64 { return r.TTFTs }, "TTFT (s, log)")
	b.WriteString("<h2>Inter-token latency CDF</h2>")
	cdf(&b, rep.Results, func(r *Result) []float64 { return r.ITLs }, "mean ITL per request (s, log)")
	if len(rep.Sweep) > 0 {
		b.WriteString("<h2>SLO attainment vs load</h2>")
		sweepChart(&b, rep.Sweep)
		b.WriteString("<h3>Capacity at 90 % SLO attainment</h3><table><tr><th>policy</th><th>max rate scale</th><th>goodput / GPU-h there</th></tr>")
		for _, r := range rep.Sweep[0].Results {
			s, g := Capacity(rep.Sweep, r.Name, 0.9)
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%g</td><td>%.1f</td></tr>", esc(r.Name), s, g)
		}
		b.WriteString("</table>")
	}
	b.WriteString("<h2>Cost per successful task</h2>")
	bars(&b, rep.Results)
	if len(rep.Rules) > 0 {
		fmt.Fprintf(&b, "<h2>Workload rules</h2><pre>%s</pre>", esc(strings.Join(rep.Rules, "\n")))
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func classNames(rs []*Result) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		for c := range r.ByPriority {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return out
}

const chartW, chartH, padL, padB = 760.0, 320.0, 60.0, 40.0

func legend(b *strings.Builder, names []string) {
	for i, n := range names {
		fmt.Fprintf(b, `<rect x="%g" y="%d" width="10" height="10" fill="%s"/><text x="%g" y="%d" font-size="11">%s</text>`,
			chartW-170, 10+i*14, palette[i%len(palette)], chartW-155, 19+i*14, html.EscapeString(n))
	}
}

// cdf plots empirical CDFs on a log-x axis.
func cdf(b *strings.Builder, rs []*Result, get func(*Result) []float64, xlabel string) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		for _, x := range get(r) {
			if x > 0 {
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
		}
	}
	if math.IsInf(lo, 1) || hi <= lo {
		b.WriteString("<p>no data</p>")
		return
	}
	llo, lhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	plotW := chartW - padL - 190
	px := func(x float64) float64 { return padL + (math.Log10(x)-llo)/(lhi-llo)*plotW }
	py := func(y float64) float64 { return chartH - padB - y*(chartH-padB-10) }
	fmt.Fprintf(b, `<svg width="%g" height="%g" xmlns="http://www.w3.org/2000/svg">`, chartW, chartH)
	axes(b, plotW)
	for e := llo; e <= lhi; e++ {
		fmt.Fprintf(b, `<text x="%g" y="%g" font-size="10" text-anchor="middle">1e%g</text>`, px(math.Pow(10, e)), chartH-padB+14, e)
	}
	yTicks(b, []float64{0, 0.5, 0.9, 0.99, 1}, py, plotW)
	fmt.Fprintf(b, `<text x="%g" y="%g" font-size="11" text-anchor="middle">%s</text>`, padL+plotW/2, chartH-6, html.EscapeString(xlabel))
	var names []string
	for i, r := range rs {
		xs := get(r)
		names = append(names, r.Name)
		if len(xs) == 0 {
			continue
		}
		var pts strings.Builder
		// At most ~400 points per curve keeps the file small.
		step := max(1, len(xs)/400)
		for k := 0; k < len(xs); k += step {
			x := math.Max(xs[k], lo)
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(x), py(float64(k+1)/float64(len(xs))))
		}
		fmt.Fprintf(&pts, "%.1f,%.1f", px(math.Max(xs[len(xs)-1], lo)), py(1))
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, palette[i%len(palette)], pts.String())
	}
	legend(b, names)
	b.WriteString("</svg>")
}

// minLabelGap is the least distance, in px, between the centres of two
// axis labels: 10 px text needs about 12 px of height, and an x label up
// to about 6 px per character of width.
const minLabelGap = 13.0

// yTicks draws a grid line for every tick but a label only where it keeps
// minLabelGap from every label already drawn, in the order given: on a CDF
// 0.99 sits 3 px below 1, and the label given first wins.
func yTicks(b *strings.Builder, ticks []float64, py func(float64) float64, plotW float64) {
	var drawn []float64
	for _, y := range ticks {
		fmt.Fprintf(b, `<line x1="%g" x2="%g" y1="%g" y2="%g" stroke="#eee"/>`, padL, padL+plotW, py(y), py(y))
		clear := true
		for _, d := range drawn {
			if math.Abs(py(y)-d) < minLabelGap {
				clear = false
			}
		}
		if clear {
			drawn = append(drawn, py(y))
			fmt.Fprintf(b, `<text x="%g" y="%g" font-size="10" text-anchor="end">%g</text>`, padL-4, py(y)+3, y)
		}
	}
}

func axes(b *strings.Builder, plotW float64) {
	fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#000"/><line x1="%g" y1="10" x2="%g" y2="%g" stroke="#000"/>`,
		padL, chartH-padB, padL+plotW, chartH-padB, padL, padL, chartH-padB)
}

// sweepChart plots SLO attainment against rate scale, one line per policy.
func sweepChart(b *strings.Builder, sweep []SweepPoint) {
	plotW := chartW - padL - 190
	maxS := 0.0
	for _, p := range sweep {
		maxS = math.Max(maxS, p.Scale)
	}
	// Sweeps are usually geometric (0.25× … 16×): spread over a log axis
	// they stay legible; a narrow sweep stays linear.
	minS := math.Inf(1)
	for _, p := range sweep {
		if p.Scale > 0 {
			minS = math.Min(minS, p.Scale)
		}
	}
	logX := minS > 0 && !math.IsInf(minS, 1) && maxS/minS >= 8
	px := func(s float64) float64 { return padL + s/maxS*plotW }
	if logX {
		px = func(s float64) float64 {
			return padL + (math.Log(math.Max(s, minS))-math.Log(minS))/(math.Log(maxS)-math.Log(minS))*plotW
		}
	}
	py := func(y float64) float64 { return chartH - padB - y*(chartH-padB-10) }
	fmt.Fprintf(b, `<svg width="%g" height="%g" xmlns="http://www.w3.org/2000/svg">`, chartW, chartH)
	axes(b, plotW)
	last := math.Inf(-1)
	for _, p := range sweep {
		label := fmt.Sprintf("%g×", p.Scale)
		// An x label needs its own width, about 6 px a character.
		if x := px(p.Scale); x-last >= 6*float64(len([]rune(label)))+6 {
			fmt.Fprintf(b, `<text x="%g" y="%g" font-size="10" text-anchor="middle">%s</text>`, x, chartH-padB+14, label)
			last = x
		}
	}
	yTicks(b, []float64{0, 0.5, 0.9, 1}, py, plotW)
	xlabel := "rate scale (× trace arrival rate)"
	if logX {
		xlabel += ", log"
	}
	fmt.Fprintf(b, `<text x="%g" y="%g" font-size="11" text-anchor="middle">%s</text>`, padL+plotW/2, chartH-6, html.EscapeString(xlabel))
	var names []string
	for i, r := range sweep[0].Results {
		names = append(names, r.Name)
		var pts strings.Builder
		for _, p := range sweep {
			for _, x := range p.Results {
				if x.Name == r.Name {
					fmt.Fprintf(&pts, "%.1f,%.1f ", px(p.Scale), py(x.SLOAttainment))
				}
			}
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, palette[i%len(palette)], pts.String())
	}
	legend(b, names)
	b.WriteString("</svg>")
}

// bars draws cost per successful task by policy.
func bars(b *strings.Builder, rs []*Result) {
	maxC := 0.0
	for _, r := range rs {
		maxC = math.Max(maxC, r.CostPerSuccessUSD)
	}
	if maxC <= 0 {
		b.WriteString("<p>no successful tasks</p>")
		return
	}
	h := 24*float64(len(rs)) + 20
	fmt.Fprintf(b, `<svg width="%g" height="%g" xmlns="http://www.w3.org/2000/svg">`, chartW, h)
	for i, r := range rs {
		y := 10 + 24*float64(i)
		w := r.CostPerSuccessUSD / maxC * (chartW - 360)
		fmt.Fprintf(b, `<text x="190" y="%g" font-size="11" text-anchor="end">%s</text><rect x="200" y="%g" width="%.1f" height="18" fill="%s"/><text x="%.1f" y="%g" font-size="11">$%.5f</text>`,
			y+13, html.EscapeString(r.Name), y, w, palette[i%len(palette)], 205+w, y+13, r.CostPerSuccessUSD)
	}
	b.WriteString("</svg>")
}
