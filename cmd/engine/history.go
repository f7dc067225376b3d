package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/history"
)

// clusterFlags pick a cluster and a namespace, as kubectl's do.
type clusterFlags struct {
	kubeconfig string
	context    string
	namespace  string
	timeout    time.Duration
}

func (f *clusterFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, else ~/.kube/config")
	fl.StringVar(&f.context, "context", "", "kubeconfig context; default: the current one")
	fl.StringVarP(&f.namespace, "namespace", "n", "", "namespace of the ManifestSync; default: the context's")
	fl.DurationVar(&f.timeout, "request-timeout", 30*time.Second, "limit of each request to the API server")
}

// client connects to the cluster and returns the key of the ManifestSync
// called name there.
func (f *clusterFlags) client(cmd, name string) (client.Client, client.ObjectKey, error) {
	cfg, key, err := f.config(cmd, name)
	if err != nil {
		return nil, key, err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, key, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, key, usageErr("%s: connecting to %s: %w", cmd, cfg.Host, err)
	}
	return c, key, nil
}

// config is the client configuration of the cluster, and the key of the
// ManifestSync called name there.
func (f *clusterFlags) config(cmd, name string) (*rest.Config, client.ObjectKey, error) {
	rules, err := kubeconfigRules(cmd, f.kubeconfig)
	if err != nil {
		return nil, client.ObjectKey{}, err
	}
	kc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context})
	cfg, err := kc.ClientConfig()
	if err != nil {
		return nil, client.ObjectKey{}, kubeconfigErr(cmd, err)
	}
	cfg.Timeout = f.timeout
	cfg.UserAgent = programName + "-" + cmd + "/" + buildVersion()
	key := client.ObjectKey{Namespace: f.namespace, Name: name}
	if key.Namespace == "" {
		if key.Namespace, _, err = kc.Namespace(); err != nil {
			return nil, key, kubeconfigErr(cmd, err)
		}
	}
	return cfg, key, nil
}

// kubeconfigErr is the usage error of command cmd that could not load a
// kubeconfig. When there is none at all, client-go's error says to set
// KUBERNETES_MASTER, which helps nobody: this one names where a kubeconfig
// is looked for, and the one `make demo` writes for its local cluster.
func kubeconfigErr(cmd string, err error) error {
	if clientcmd.IsEmptyConfig(err) {
		return usageErr("%s: no cluster: --kubeconfig, $KUBECONFIG or ~/.kube/config (after make demo: --kubeconfig bin/demo/kubeconfig)", cmd)
	}
	return usageErr("%s: kubeconfig: %w", cmd, err)
}

// notFound makes a missing ManifestSync's error say which.
func notFound(cmd string, key client.ObjectKey, err error) error {
	if apierrors.IsNotFound(err) {
		return usageErr("%s: ManifestSync %s not found", cmd, key)
	}
	return usageErr("%s: %w", cmd, err)
}

func newHistoryCmd() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "List the revisions a ManifestSync evaluated",
		Long: `List the entries of a ManifestSync's status.history: the last 10 revisions
it evaluated, numbered from 0, the newest (what is applied now, or was
tried last), as .status.history[N] is. Each shows when, the result, the
revision (a digest over every input) and the revision of every source:
"main@sha1:HASH" for a git branch, "sha1:HASH" for a pinned commit,
"resourceVersion:N" for an object. "engine rollback NAME --to N" goes back
to one of them.

The cluster is that of --kubeconfig, else $KUBECONFIG, else ~/.kube/config,
in its current context or --context.

Exit status: 0 listed (or no history yet), 2 error (bad flags, unreachable
cluster, no such ManifestSync).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHistory(cmd.Context(), cmd.OutOrStdout(), &f, args[0])
		},
	}
	f.add(cmd.Flags())
	return cmd
}

func runHistory(ctx context.Context, stdout io.Writer, f *clusterFlags, name string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c, key, err := f.client("history", name)
	if err != nil {
		return err
	}
	ms := &v1alpha1.ManifestSync{}
	if err := c.Get(ctx, key, ms); err != nil {
		return notFound("history", key, err)
	}
	err = history.Write(stdout, ms)
	if errors.Is(err, history.ErrNoHistory) {
		fmt.Fprintf(stdout, "ManifestSync %s has no history yet\n", key)
		return nil
	}
	return err
}
