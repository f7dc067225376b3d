package harness

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Series is one line of a chart: a name and its samples.
type Series struct {
	Name   string
	Values []float64
}

// WriteCDF draws the cumulative distribution of each series as an SVG
// line chart: x is the value (unit), y the share of samples at or below
// it. It is written by hand, so that the report needs no plotting library.
func WriteCDF(w io.Writer, title, unit string, series []Series) error {
	const (
		width, height        = 720, 420
		left, right, top, bt = 64, 180, 40, 48
		plotW, plotH         = width - left - right, height - top - bt
	)
	colors := []string{"#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e"}
	hi := 0.0
	for _, s := range series {
		for _, v := range s.Values {
			hi = max(hi, v)
		}
	}
	hi = niceCeil(hi)
	x := func(v float64) float64 { return left + v/hi*plotW }
	y := func(p float64) float64 { return top + (1-p)*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for i := 0; i <= 5; i++ {
		v := hi * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			x(v), top, x(v), top+plotH, x(v), top+plotH+16, trimFloat(v))
		p := float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n",
			left, y(p), left+plotW, y(p), left-6, y(p)+4, p*100)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", left, top, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", left+plotW/2, height-10, html.EscapeString(unit))
	fmt.Fprintf(&b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">targets updated (cumulative share)</text>`+"\n", top+plotH/2)
	for i, s := range series {
		if len(s.Values) == 0 {
			continue
		}
		color := colors[i%len(colors)]
		vs := slices.Clone(s.Values)
		slices.Sort(vs)
		// At most ~600 points per line: one per pixel is enough.
		step := max(1, len(vs)/600)
		pts := []string{fmt.Sprintf("%.1f,%.1f", x(0), y(0))}
		for j := 0; j < len(vs); j += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(vs[j]), y(float64(j+1)/float64(len(vs)))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(vs[len(vs)-1]), y(1)))
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		ly := top + 16 + i*20
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n",
			left+plotW+12, ly, left+plotW+32, ly, color, left+plotW+38, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}
