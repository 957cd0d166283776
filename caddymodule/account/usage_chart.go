package account

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The dashboard's picture of use over time: requests and credits per UTC day of the last
// chartDays days, stacked by tool, drawn on the server as inline SVG (no script, nothing from
// another site: the page's Content-Security-Policy allows neither). The numbers come from the
// ledger's Usage summary, which reads only those days.

const (
	chartDays  = 30
	chartTools = 5 // tools with a colour of their own; the rest are "other tools"

	// The drawing's coordinates (its viewBox); CSS scales it to the page's width.
	chartW, chartH              = 400, 180
	chartLeft, chartTop         = 36, 8
	chartBottom                 = 22 // room for the day labels
	chartPlotW                  = chartW - chartLeft - 4
	chartPlotH                  = chartH - chartTop - chartBottom
	chartOther                  = "other tools"
	chartLabelEvery             = 7 // a day label every week, counted back from today
	chartBarGap         float64 = 0.2
)

// chartColors tell the tools apart (Okabe-Ito's colour-blind-safe set), in legend order; the
// last is "other tools".
var chartColors = [chartTools + 1]string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#6b7480"}

// usageSummary is what the dashboard shows of the last chartDays days.
type usageSummary struct {
	From, To string // the first and last day, YYYY-MM-DD
	Requests chart  // requests begun per day, by tool (both modes)
	Credits  chart  // live credits charged per day, by tool
	Tools    []toolTotal
	Total    toolTotal
}

// toolTotal is one line of the summary's table.
type toolTotal struct {
	Tool                           string
	Color                          string
	Requests, Credits, TestCredits int64
	NotCharged                     int64
}

// chart is one stacked bar chart, ready for the template.
type chart struct {
	Title  string // what is counted, e.g. "Requests per day"
	Label  string // a sentence for screen readers
	Max    int64  // the top of the scale
	Bars   []chartBar
	Ticks  []chartTick
	Days   []chartDay
	W, H   int
	PlotX  int
	PlotX2 int
}

type chartBar struct {
	X, Y, W, H float64
	Color      string
	Title      string // the bar's tooltip: day, tool and number
}

type chartTick struct {
	Y     float64
	Label string
}

type chartDay struct {
	X      float64
	Label  string
	Anchor string // SVG text-anchor: the last day's label ends at its bar, inside the drawing
}

// summarizeUsage turns the ledger's rows (days in [first, first+chartDays)) into the two charts
// and the table by tool.
func summarizeUsage(rows []ledger.UsageRow, first time.Time) usageSummary {
	days := make([]string, chartDays)
	dayIndex := map[string]int{}
	for i := range days {
		days[i] = first.AddDate(0, 0, i).Format("2006-01-02")
		dayIndex[days[i]] = i
	}
	totals := map[string]*toolTotal{}
	for _, r := range rows {
		if _, ok := dayIndex[r.Day]; !ok {
			continue
		}
		t := totals[r.Tool]
		if t == nil {
			t = &toolTotal{Tool: r.Tool}
			totals[r.Tool] = t
		}
		t.Requests += r.Requests
		t.NotCharged += r.Voided
		if r.Mode == ledger.Test {
			t.TestCredits += r.Credits
		} else {
			t.Credits += r.Credits
		}
	}
	tools := make([]toolTotal, 0, len(totals))
	for _, t := range totals {
		tools = append(tools, *t)
	}
	slices.SortFunc(tools, func(a, b toolTotal) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Tool, b.Tool))
	})
	// The first chartTools tools keep their names; the rest share one colour.
	group := map[string]int{}
	names := []string{}
	for i := range tools {
		if i < chartTools {
			group[tools[i].Tool] = i
			names = append(names, tools[i].Tool)
			tools[i].Color = chartColors[i]
		} else {
			group[tools[i].Tool] = chartTools
			tools[i].Color = chartColors[chartTools]
		}
	}
	if len(tools) > chartTools {
		names = append(names, chartOther)
	}
	requests := make([][]int64, chartDays) // [day][group]
	credits := make([][]int64, chartDays)
	for i := range requests {
		requests[i] = make([]int64, len(names))
		credits[i] = make([]int64, len(names))
	}
	for _, r := range rows {
		d, ok := dayIndex[r.Day]
		if !ok {
			continue
		}
		g := group[r.Tool]
		requests[d][g] += r.Requests
		if r.Mode == ledger.Live {
			credits[d][g] += r.Credits
		}
	}
	s := usageSummary{From: days[0], To: days[chartDays-1], Tools: tools}
	s.Total.Tool = "All tools"
	for _, t := range tools {
		s.Total.Requests += t.Requests
		s.Total.Credits += t.Credits
		s.Total.TestCredits += t.TestCredits
		s.Total.NotCharged += t.NotCharged
	}
	s.Requests = drawChart("Requests per day", "request", days, names, requests)
	s.Credits = drawChart("Credits charged per day", "credit", days, names, credits)
	return s
}

// drawChart lays out stacked bars: one bar a day, one segment a tool group with a count.
func drawChart(title, unit string, days, names []string, counts [][]int64) chart {
	c := chart{Title: title, W: chartW, H: chartH, PlotX: chartLeft, PlotX2: chartLeft + chartPlotW}
	var peak, sum int64
	peakDay := ""
	for d, byGroup := range counts {
		var day int64
		for _, n := range byGroup {
			day += n
		}
		sum += day
		if day > peak {
			peak, peakDay = day, days[d]
		}
	}
	c.Max = niceMax(peak)
	c.Label = fmt.Sprintf("%s, %s to %s: %s in all", title, days[0], days[len(days)-1], count(sum, unit))
	if peak > 0 {
		c.Label += fmt.Sprintf(", at most %d on %s", peak, peakDay)
	}
	c.Label += ". The table below lists them by tool."
	for _, v := range []int64{0, c.Max / 2, c.Max} {
		c.Ticks = append(c.Ticks, chartTick{Y: yOf(v, c.Max), Label: strconv.FormatInt(v, 10)})
	}
	slot := float64(chartPlotW) / float64(len(days))
	barW := slot * (1 - chartBarGap)
	for d, byGroup := range counts {
		x := float64(chartLeft) + float64(d)*slot + slot*chartBarGap/2
		var below int64
		for g, n := range byGroup {
			if n == 0 {
				continue
			}
			top, bottom := yOf(below+n, c.Max), yOf(below, c.Max)
			c.Bars = append(c.Bars, chartBar{X: round1(x), Y: top, W: round1(barW), H: round1(bottom - top),
				Color: chartColors[min(g, chartTools)], Title: fmt.Sprintf("%s, %s: %s", days[d], names[g], count(n, unit))})
			below += n
		}
		switch {
		case d == len(days)-1:
			c.Days = append(c.Days, chartDay{X: round1(x + barW), Label: days[d][5:], Anchor: "end"})
		case (len(days)-1-d)%chartLabelEvery == 0:
			c.Days = append(c.Days, chartDay{X: round1(x + barW/2), Label: days[d][5:], Anchor: "middle"})
		}
	}
	return c
}

// count is n with unit, plural unless n is 1: "1 request", "3 requests".
func count(n int64, unit string) string {
	if n != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// yOf is the height of v on a scale from 0 to max.
func yOf(v, max int64) float64 {
	return round1(float64(chartTop) + float64(chartPlotH)*(1-float64(v)/float64(max)))
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// niceMax is the top of a scale for peak: 2, 4 or 10 times a power of ten, so that the middle
// line (half of it) is a round whole number too.
func niceMax(peak int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{2, 4, 10} {
			if peak <= m*p {
				return m * p
			}
		}
	}
}
