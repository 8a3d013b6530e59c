package idemui

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem/idemops"
)

// chart is Activity drawn as an inline SVG, server-side: a bar per minute,
// done (green) with failed (red) on top, and a few time labels. No script.
type chart struct {
	Width, Height, Top int
	Bars               []bar
	Labels             []label
	Max                int // the count of the tallest bar, the axis' top
	Done, Failed       int
	FailedMore         bool // the failed counts stopped at the page's limit (idemops.Activity.FailedMore)
	DoneMore           bool // and the done counts (idemops.Activity.DoneMore)
	From, To           time.Time
}

type bar struct {
	X, W               float64
	DoneY, DoneH       float64
	FailedY, FailedH   float64
	Title              string // the bar's tooltip
	HasDone, HasFailed bool
}

type label struct {
	X    float64
	Text string
}

// The chart's size in SVG units; the page scales it to its width.
const (
	chartWidth  = 960
	chartHeight = 180
	chartTop    = 14 // room above the bars for the axis' top count
	chartBottom = 18 // room below for the time labels
)

// drawChart lays out a's minutes as bars.
func drawChart(a *idemops.Activity) chart {
	c := chart{Width: chartWidth, Height: chartHeight, Top: chartTop, Done: a.Done, Failed: a.Failed, FailedMore: a.FailedMore, DoneMore: a.DoneMore, From: a.From, To: a.To}
	for _, m := range a.Minutes {
		c.Max = max(c.Max, m.Done+m.Failed)
	}
	n := len(a.Minutes)
	if n == 0 {
		return c
	}
	plot := float64(chartHeight - chartTop - chartBottom)
	step := float64(chartWidth) / float64(n)
	scale := 0.0
	if c.Max > 0 {
		scale = plot / float64(c.Max)
	}
	base := float64(chartHeight - chartBottom)
	for i, m := range a.Minutes {
		b := bar{X: float64(i) * step, W: max(step-1, 0.5), HasDone: m.Done > 0, HasFailed: m.Failed > 0,
			Title: fmt.Sprintf("%s: %d done, %d failed", m.At.Format("15:04"), m.Done, m.Failed)}
		b.DoneH = float64(m.Done) * scale
		b.DoneY = base - b.DoneH
		b.FailedH = float64(m.Failed) * scale
		b.FailedY = b.DoneY - b.FailedH
		c.Bars = append(c.Bars, b)
	}
	// A label every so many minutes, so that about six fit.
	every := max(1, n/6)
	for _, nice := range []int{5, 10, 15, 30, 60, 120, 180, 240} {
		if nice >= every {
			every = nice
			break
		}
	}
	for i, m := range a.Minutes {
		if m.At.Minute()%every == 0 && (every < 60 || m.At.Hour()%(every/60) == 0) {
			c.Labels = append(c.Labels, label{X: float64(i) * step, Text: m.At.Format("15:04")})
		}
	}
	return c
}
