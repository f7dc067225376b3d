package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/oci"
)

// ociFlags are the flags push and pull share.
type ociFlags struct {
	credsFile string
	insecure  bool
	timeout   time.Duration
}

func (f *ociFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.credsFile, "creds-file", "", "a .dockerconfigjson (docker login's config.json) holding the registry's credentials; default $DOCKER_CONFIG/config.json when DOCKER_CONFIG is set")
	cmd.Flags().BoolVar(&f.insecure, "insecure", false, "talk to the registry over plain http (credentials only to a loopback host)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "give up after this long")
}

// dockerConfig reads the credentials file: --creds-file, else
// $DOCKER_CONFIG/config.json when DOCKER_CONFIG is set, else none.
func (f *ociFlags) dockerConfig() ([]byte, error) {
	name := f.credsFile
	if name == "" {
		dir := os.Getenv("DOCKER_CONFIG")
		if dir == "" {
			return nil, nil
		}
		name = filepath.Join(dir, "config.json")
		if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	b, err := source.ReadRegularFile(name)
	if err != nil {
		return nil, fmt.Errorf("credentials file: %w", err)
	}
	if len(b) > 1<<20 {
		return nil, fmt.Errorf("credentials file %s: larger than 1 MiB", name)
	}
	return b, nil
}

func (f *ociFlags) limits() oci.Limits {
	l := oci.DefaultLimits()
	l.Timeout = f.timeout
	return l
}

type pushFlags struct {
	ociFlags
	source, revision string
}

func newPushCmd() *cobra.Command {
	var f pushFlags
	cmd := &cobra.Command{
		Use:   "push DIR oci://HOST/REPO:TAG",
		Short: "Publish a directory to an OCI registry, as flux push artifact does",
		Long: `Publish the files of DIR to an OCI registry as an artifact in Flux's layout
(what flux push artifact writes, so Flux's OCIRepository and an oci
source read it alike), and print its digest (sha256:HEX).

The artifact is an OCI image manifest with the config media type
application/vnd.cncf.flux.config.v1+json and one layer,
application/vnd.cncf.flux.content.v1.tar+gzip: a gzipped tar of DIR's
regular files, sorted, with zero times and no owners, so the same files
give the same layer. The manifest carries the annotations
org.opencontainers.image.source (--source), .revision (--revision) and
.created (now, or SOURCE_DATE_EPOCH when it is set: then the same
directory gives the same digest).

.git/ is left out, and so is what a .sourceignore at DIR's root names
(gitignore syntax, as Flux reads it). A symbolic link or a special file
in DIR is an error naming it: what is pushed is what DIR holds.

Credentials are read from --creds-file, or $DOCKER_CONFIG/config.json
when DOCKER_CONFIG is set: the "auths" entry of the registry's host
(credential helpers are not run). --insecure pushes over plain http, and
sends credentials that way only to a loopback host. Errors name the
registry, never a credential.

Exit status: 0 pushed, 1 the registry refused or could not be reached,
2 usage error or an unreadable DIR.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPush(cmd.Context(), cmd.OutOrStdout(), &f, args[0], args[1])
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.source, "source", "", "the org.opencontainers.image.source annotation: where the files come from (a repository URL)")
	cmd.Flags().StringVar(&f.revision, "revision", "", "the org.opencontainers.image.revision annotation (e.g. main@sha1:HASH)")
	return cmd
}

func runPush(ctx context.Context, stdout io.Writer, f *pushFlags, dir, dst string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, _, err := oci.ParseRef(dst); err != nil {
		return usageErr("push: %w", err)
	}
	creds, err := f.dockerConfig()
	if err != nil {
		return usageErr("push: %w", err)
	}
	created := time.Now()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return usageErr("push: SOURCE_DATE_EPOCH %q is not a number of seconds", s)
		}
		created = time.Unix(sec, 0)
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return usageErr("push: %s is not a directory", dir)
	}
	d, err := oci.ReadDir(dir, f.limits())
	if err != nil {
		return usageErr("push: %w", err)
	}
	if len(d.Files) == 0 {
		return usageErr("push: %s holds no file to push", dir)
	}
	digest, err := oci.Push(ctx, d, dst, oci.PushOptions{
		Source: f.source, Revision: f.revision, Created: created,
		Insecure: f.insecure, DockerConfigJSON: creds, Limits: f.limits(),
	})
	if err != nil {
		return failed(fmt.Errorf("push: %w", err))
	}
	fmt.Fprintln(stdout, digest)
	return nil
}

type pullFlags struct {
	ociFlags
	output         string
	force          bool
	layerMediaType string
	layerOperation string
}

func newPullCmd() *cobra.Command {
	var f pullFlags
	cmd := &cobra.Command{
		Use:   "pull oci://HOST/REPO:TAG|oci://HOST/REPO@sha256:HEX -o DIR",
		Short: "Write the files of an OCI artifact to a directory, to look at what a source reads",
		Long: `Read an OCI artifact as an oci source reads it and write its files under
DIR, then print its revision (TAG@sha256:HEX, or sha256:HEX for a
digest): for debugging what the cluster would apply.

The layer read is the first, or the first of --layer-media-type; it is
extracted (a tar+gzip: Flux's content layer, or any plain one), or with
--layer-operation copy written as one file (named by its
org.opencontainers.image.title annotation, else layer.tgz).

The same rules as the source's hold: a layer larger than the limit is
refused before it is downloaded, the unpacked size and the number of
files are bounded, and an archive entry that leaves the directory, a
link (symbolic or hard), or a device or other special file is an error
naming the entry; nothing is written then.

DIR is created; an existing DIR that is not empty is refused unless
--force (files of the artifact then replace those of the same name;
nothing is written outside DIR, through a link or otherwise).

Credentials and --insecure are as for engine push.

Exit status: 0 written, 1 the registry or the artifact was refused or
could not be read, 2 usage error or DIR not empty.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPull(cmd.Context(), cmd.OutOrStdout(), &f, args[0])
		},
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "the directory to write the files to (required)")
	cmd.Flags().BoolVar(&f.force, "force", false, "write into DIR even when it is not empty")
	cmd.Flags().StringVar(&f.layerMediaType, "layer-media-type", "", "read the first layer of this media type (default: the first layer)")
	cmd.Flags().StringVar(&f.layerOperation, "layer-operation", "extract", "extract the layer (a tar+gzip) or copy it as one file")
	return cmd
}

func runPull(ctx context.Context, stdout io.Writer, f *pullFlags, ref string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.output == "" {
		return usageErr("pull: -o DIR is required")
	}
	if f.layerOperation != oci.OperationExtract && f.layerOperation != oci.OperationCopy {
		return usageErr("pull: --layer-operation %q: extract or copy", f.layerOperation)
	}
	url, r, err := oci.ParseRef(ref)
	if err != nil {
		return usageErr("pull: %w", err)
	}
	if entries, err := os.ReadDir(f.output); err == nil && len(entries) > 0 && !f.force {
		return usageErr("pull: %s exists and is not empty: give another directory, or --force", f.output)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return usageErr("pull: %w", err)
	}
	creds, err := f.dockerConfig()
	if err != nil {
		return usageErr("pull: %w", err)
	}
	src := oci.Source{URL: url, Ref: r, Insecure: f.insecure, DockerConfigJSON: creds}
	if f.layerMediaType != "" || f.layerOperation != oci.OperationExtract {
		src.LayerSelector = &oci.LayerSelector{MediaType: f.layerMediaType, Operation: f.layerOperation}
	}
	a, err := oci.New(f.limits()).Fetch(ctx, src, "")
	if err != nil {
		return failed(fmt.Errorf("pull: %w", err))
	}
	if err := writePulled(f.output, a.Files); err != nil {
		return failed(fmt.Errorf("pull: %w", err))
	}
	fmt.Fprintln(stdout, a.Revision)
	return nil
}

// writePulled writes files under dir through an os.Root, so that no path
// and no link already in dir leads a write outside it.
func writePulled(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := root.WriteFile(name, files[name], 0o644); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
