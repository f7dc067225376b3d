package main

import (
	"github.com/spf13/pflag"

	"github.com/manifestsync/manifestsync/engine"
	helmrender "github.com/manifestsync/manifestsync/helm"
)

// capabilityFlags are the .Capabilities that charts render with offline
// (eval, vet, diff), as `helm template` takes them: a Kubernetes version,
// and API versions added to the Helm SDK's defaults. The operator asks
// each target cluster instead.
type capabilityFlags struct {
	kubeVersion string
	apiVersions []string
}

func addCapabilityFlags(fl *pflag.FlagSet, c *capabilityFlags) {
	fl.StringVar(&c.kubeVersion, "kube-version", helmrender.DefaultKubeVersion, "the Kubernetes version charts see as .Capabilities.KubeVersion")
	fl.StringArrayVar(&c.apiVersions, "api-versions", nil, "GROUP/VERSION[/KIND]: an API version charts see in .Capabilities.APIVersions, besides the Helm SDK's defaults (repeatable)")
}

// options sets the chart renderer and the capabilities of opts; a kube
// version that does not parse is a usage error of command.
func (c *capabilityFlags) options(command string, opts *engine.Options) error {
	if err := helmrender.CheckKubeVersion(c.kubeVersion); err != nil {
		return usageErr("%s: --kube-version: %w", command, err)
	}
	opts.Helm = helmrender.Renderer{}
	opts.Capabilities = engine.HelmCapabilities{
		KubeVersion: c.kubeVersion,
		APIVersions: append(helmrender.DefaultAPIVersions(), c.apiVersions...),
	}
	return nil
}
