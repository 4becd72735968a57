package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/adapter/gguf"
)

// runGGUF writes GGUF model files. Its one subcommand, tiny, writes the
// model the project's engine tests run (internal/adapter/gguf.TinyLlama)
// and a Modelfile for `ollama create`, so the tiny model docs/engines.md
// assumes can be made on any machine without downloading one.
func runGGUF(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "tiny" {
		return errors.New("usage: switchyard gguf tiny OUT.gguf [--modelfile F] [--seed N] [--name S] [--layers N] [--embed N] [--context N]")
	}
	fs := flag.NewFlagSet("gguf tiny", flag.ContinueOnError)
	var o gguf.TinyOptions
	fs.StringVar(&o.Name, "name", "", "general.name of the model (default switchyard-tiny)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the random weights: the same options give the same file")
	fs.IntVar(&o.Layers, "layers", 0, "transformer blocks (default 2)")
	fs.IntVar(&o.Embed, "embed", 0, "hidden size (default 64)")
	fs.IntVar(&o.Context, "context", 0, "llama.context_length (default 2048)")
	modelfile := fs.String("modelfile", "", "where to write the Modelfile for `ollama create` (default OUT with .Modelfile for .gguf; \"-\" for none)")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: switchyard gguf tiny OUT.gguf [flags]")
	}
	out := pos[0]
	f, err := gguf.TinyLlama(o)
	if err != nil {
		return err
	}
	n, err := writeGGUF(out, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d bytes, a llama-architecture model of %d parameters (random weights: its text is gibberish)\n", out, n, f.Params())
	if *modelfile == "-" {
		return nil
	}
	if *modelfile == "" {
		*modelfile = strings.TrimSuffix(out, ".gguf") + ".Modelfile"
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err := os.WriteFile(*modelfile, []byte(tinyModelfile(abs)), 0o644); err != nil {
		return fmt.Errorf("gguf: write modelfile: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s; register the model with: ollama create tiny -f %s\n", *modelfile, *modelfile)
	return nil
}

// tinyModelfile is the Modelfile internal/testkit/enginetest registers the
// tiny model with. The prompt alone, no chat markup: the model has no chat
// template, so a request's tokens are exactly its text's. One thread:
// llama.cpp's worker threads spin while they wait, and on a small shared
// machine several slow a model this size down a hundredfold.
func tinyModelfile(ggufPath string) string {
	return "FROM " + ggufPath + "\nTEMPLATE {{ .Prompt }}\nPARAMETER num_thread 1\n"
}

func writeGGUF(path string, f *gguf.File) (int64, error) {
	file, err := os.Create(path)
	if err != nil {
		return 0, fmt.Errorf("gguf: %w", err)
	}
	bw := bufio.NewWriter(file)
	w := &countingWriter{w: bw}
	if err := f.Write(w); err != nil {
		file.Close()
		return 0, fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		file.Close()
		return 0, fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := file.Close(); err != nil {
		return 0, fmt.Errorf("gguf: close %s: %w", path, err)
	}
	return w.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
