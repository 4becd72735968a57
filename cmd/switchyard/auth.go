package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/adapter/auth"
)

// runAuth is `switchyard auth`: generate a nats-server accounts block with
// one confined user per tenant and one per service (docs/security.md).
func runAuth(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("auth", flag.ContinueOnError)
	tenants := fs.String("tenants", "", "comma-separated tenant names (required)")
	services := fs.String("services", strings.Join(auth.Services, ","), "comma-separated service users to generate")
	out := fs.String("out", "", "write the config here (0600) instead of stdout")
	pwFile := fs.String("password-file", "", "write 'user password' lines here (0600) instead of showing them once on stderr")
	cost := fs.Int("bcrypt-cost", 11, "bcrypt cost of the password hashes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tenants == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: switchyard auth --tenants a,b,c [--out nats.conf] [--password-file F]")
	}
	for _, p := range []string{*out, *pwFile} {
		if _, err := os.Stat(p); p != "" && err == nil {
			return fmt.Errorf("%s exists; refusing to replace deployed credentials (remove it first)", p)
		}
	}
	g, err := auth.Generate(auth.Config{Tenants: authList(*tenants), Services: authList(*services), Cost: *cost})
	if err != nil {
		return err
	}
	// Passwords first: if they cannot be saved, no config should exist
	// whose passwords nobody knows.
	pw := auth.PasswordFile(g.Users)
	if *pwFile != "" {
		if err := writePrivateFile(*pwFile, pw); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(os.Stderr, "# passwords (shown once; only bcrypt hashes are in the config):\n%s", pw)
	}
	if *out == "" {
		_, err := io.WriteString(stdout, g.Config)
		return err
	}
	if err := writePrivateFile(*out, g.Config); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s: %d tenants, %d services; include it from the server config (include %s)\n", *out, len(authList(*tenants)), len(authList(*services)), *out)
	return nil
}

func authList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// writePrivate writes a file only its owner can read, refusing to
// overwrite so a second run cannot silently invalidate deployed passwords.
func writePrivateFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := io.WriteString(f, content); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
