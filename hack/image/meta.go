package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/manifestsync/manifestsync/internal/enginebuild"
)

const (
	defaultSource   = "https://github.com/manifestsync/manifestsync"
	defaultCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// Meta is what an image says about where it comes from: the labels, the
// stamp in the binary, and the one timestamp every file, layer and config
// carries.
type Meta struct {
	Version  string    // git describe, or -version
	Commit   string    // the full commit hash
	Created  time.Time // SOURCE_DATE_EPOCH, else the commit's committer time
	Source   string    // repository URL
	Licenses string    // SPDX expression
}

// gitMeta reads the version, commit and commit time of the checkout at dir.
func gitMeta(ctx context.Context, dir string) (Meta, error) {
	var m Meta
	var err error
	if m.Commit, err = git(ctx, dir, "rev-parse", "HEAD"); err != nil {
		return m, err
	}
	if m.Version, err = git(ctx, dir, "describe", "--tags", "--always", "--dirty"); err != nil {
		return m, err
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(ctx, dir, "log", "-1", "--format=%ct", "HEAD"); err != nil {
			return m, err
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return m, fmt.Errorf("SOURCE_DATE_EPOCH or commit time %q: %w", epoch, err)
	}
	m.Created = time.Unix(sec, 0).UTC()
	return m, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// compileEngine cross-builds the image's two programs of the module at
// dir for p into the directory out (enginebuild.ImageCommands: engineFile,
// the lean engine, and workerFile): static (CGO off), without local paths
// (-trimpath), with the version and commit stamped. The environment that
// would make two builds differ (GOFLAGS, the amd64/arm64 feature level) is
// fixed.
func compileEngine(ctx context.Context, dir string, p v1.Platform, m Meta, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", m.Version, m.Commit)
	// The engine's build tags (enginebuild) as bin/engine's, so that the
	// builds share their compiled packages.
	for _, cmd := range enginebuild.ImageCommands(ctx, dir, out, "-buildvcs=false", "-ldflags", ldflags) {
		cmd.Env = append(cmd.Env, "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=", "GOAMD64=v1", "GOARM64=v8.0")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s for %s: %w\n%s", strings.Join(cmd.Args, " "), p, err, stderr.String())
		}
	}
	return nil
}

// parsePlatforms reads "linux/amd64,linux/arm64".
func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		p, err := v1.ParsePlatform(f)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want OS/ARCH, as linux/amd64", f)
		}
		if seen[p.String()] {
			return nil, fmt.Errorf("platform %q given twice", f)
		}
		seen[p.String()] = true
		ps = append(ps, *p)
	}
	return ps, nil
}
