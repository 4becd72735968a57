package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/adapter/gguf"
)

// `switchyard gguf tiny OUT` writes TinyLlama's bytes for the same options
// (the gguf package's tests read that model back), and a Modelfile naming
// it by absolute path, so `ollama create` works from any directory.
func TestGGUFTiny(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tiny.gguf")
	var stdout bytes.Buffer
	if err := runGGUF(context.Background(), []string{"tiny", out, "--seed", "7"}, &stdout); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := gguf.TinyLlama(gguf.TinyOptions{Seed: 7})
	var buf bytes.Buffer
	if err := want.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, buf.Bytes()) {
		t.Fatal("the command's file is not TinyLlama's for the same options")
	}
	mf, err := os.ReadFile(filepath.Join(dir, "tiny.Modelfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(mf), "FROM "+out+"\n") || !strings.Contains(stdout.String(), "ollama create tiny -f") {
		t.Fatalf("modelfile %q, output %q", mf, stdout.String())
	}

	for _, bad := range [][]string{nil, {"huge", out}, {"tiny"}, {"tiny", out, "--embed", "6"}, {"tiny", filepath.Join(dir, "no", "such", "dir.gguf")}} {
		if err := runGGUF(context.Background(), bad, &stdout); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
