// Package reporttest owns the browser check of Switchyard's HTML reports:
// it opens a report in headless Chromium (Debian's chromium package,
// installed by .ci/install-chromium.sh) in a window of a given width and
// reports script errors and layout faults — a page or table wider than the
// window, chart labels drawn over each other. Tests skip when Chromium is
// absent, unless SWITCHYARD_REQUIRE_TOOLS=1.
package reporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Chromium returns the browser's path, or skips t when there is none (fails
// it when SWITCHYARD_REQUIRE_TOOLS=1, as CI sets once .ci/ installed it).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SWITCHYARD_REQUIRE_TOOLS") == "1" {
		t.Fatal("chromium not found and SWITCHYARD_REQUIRE_TOOLS=1 (install it with .ci/install-chromium.sh)")
	}
	t.Skip("chromium not found; .ci/install-chromium.sh installs Debian's package")
	return ""
}

// Findings is what one page load found.
type Findings struct {
	// ScriptErrors are uncaught errors and console errors.
	ScriptErrors []string `json:"script_errors"`
	// Layout lists layout faults, one line each.
	Layout []string `json:"layout"`
	// Texts counts the SVG text elements checked for overlap, so a test
	// can tell a checked chart from a page with none.
	Texts int `json:"texts"`
}

// The probe runs in the page after everything else: it measures the laid
// out page at the window's width. Uncaught errors are gathered from the
// start by the listener put first in <head>.
const listener = `<script>window.__reportErrors=[];addEventListener("error",function(e){__reportErrors.push(String(e.message||e.type)+" at "+(e.filename||"")+":"+(e.lineno||0))},true);</script>`

const probe = `<script>(function(){
var W=innerWidth, out={script_errors:__reportErrors, layout:[], texts:0};
var de=document.documentElement;
if(de.scrollWidth>W+1){out.layout.push("page is "+de.scrollWidth+" px wide in a "+W+" px window");}
var tables=document.querySelectorAll("table");
for(var i=0;i<tables.length;i++){var r=tables[i].getBoundingClientRect();
 if(r.right>W+1||r.left<-1){var h=tables[i].querySelector("th,td");out.layout.push("table "+(i+1)+" ("+(h?h.textContent.slice(0,30):"")+") spans "+Math.round(r.left)+"-"+Math.round(r.right)+" px in a "+W+" px window");}}
var svgs=document.querySelectorAll("svg");
for(var s=0;s<svgs.length;s++){var r=svgs[s].getBoundingClientRect();
 if(r.right>W+1){out.layout.push("chart "+(s+1)+" ends at "+Math.round(r.right)+" px in a "+W+" px window");}
 var ts=svgs[s].querySelectorAll("text"), boxes=[];
 for(var k=0;k<ts.length;k++){var b=ts[k].getBoundingClientRect(); if(b.width>0&&b.height>0){boxes.push([b,ts[k].textContent]);}}
 out.texts+=boxes.length;
 for(var a=0;a<boxes.length;a++){for(var c=a+1;c<boxes.length;c++){var p=boxes[a][0],q=boxes[c][0];
  var ox=Math.min(p.right,q.right)-Math.max(p.left,q.left), oy=Math.min(p.bottom,q.bottom)-Math.max(p.top,q.top);
  if(ox>1&&oy>1){out.layout.push("chart "+(s+1)+": labels \""+boxes[a][1]+"\" and \""+boxes[c][1]+"\" overlap");}}}}
var pre=document.createElement("pre");pre.id="__report_check";pre.textContent=JSON.stringify(out);document.body.appendChild(pre);
})();</script>`

var checkRe = regexp.MustCompile(`(?s)<pre id="__report_check">(.*?)</pre>`)

// consoleRe matches Chromium's --enable-logging lines for console errors
// and uncaught exceptions.
var consoleRe = regexp.MustCompile(`(?m)^.*(?:CONSOLE\(\d+\)\].*(?:Uncaught|Error)|:ERROR:CONSOLE).*$`)

// Check loads the report at path in headless Chromium at width×900 px.
func Check(t testing.TB, chromium, path string, width int) Findings {
	t.Helper()
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	headAt := strings.Index(s, "<head>")
	bodyEnd := strings.LastIndex(s, "</body>")
	if headAt < 0 || bodyEnd < 0 {
		t.Fatalf("%s: no <head> or </body>: not a whole HTML page", path)
	}
	harness := s[:headAt+len("<head>")] + listener + s[headAt+len("<head>"):bodyEnd] + probe + s[bodyEnd:]
	dir := t.TempDir()
	file := filepath.Join(dir, "page.html")
	if err := os.WriteFile(file, []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--user-data-dir="+filepath.Join(dir, "profile"), fmt.Sprintf("--window-size=%d,900", width),
		"--hide-scrollbars", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", "--dump-dom", "file://"+file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, tail(stderr.String(), 2000))
	}
	m := checkRe.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("the page's check did not run (a script error before it?); stderr:\n%s", tail(stderr.String(), 2000))
	}
	var f Findings
	raw := strings.NewReplacer("&quot;", `"`, "&amp;", "&", "&lt;", "<", "&gt;", ">", "&#39;", "'").Replace(m[1])
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		t.Fatalf("check output %q: %v", raw, err)
	}
	f.ScriptErrors = append(f.ScriptErrors, consoleRe.FindAllString(stderr.String(), -1)...)
	return f
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
