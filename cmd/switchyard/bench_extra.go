package main

import (
	"context"
	"io"
)

// extraBenches are benches implemented in their own files.
var extraBenches = map[string]func(context.Context, []string, io.Writer) error{}
