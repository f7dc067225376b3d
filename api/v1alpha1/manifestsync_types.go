package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Kind is the kind of the ManifestSync resource.
const Kind = "ManifestSync"

// ManifestSync names its inputs, an optional transform, schemas and a list of
// targets; the operator evaluates it and applies the result to every target.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=msync,categories=all
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Targets",type=string,JSONPath=`.status.targetsSummary`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.shortRevision`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`,priority=1
// +kubebuilder:printcolumn:name="Last sync",type=date,JSONPath=`.status.lastSuccessfulSyncTime`,priority=1
// +kubebuilder:printcolumn:name="Replica",type=string,JSONPath=`.metadata.labels.shard\.manifestsync\.dev/owner`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type ManifestSync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ManifestSyncSpec   `json:"spec,omitempty"`
	Status ManifestSyncStatus `json:"status,omitempty"`
}

// ManifestSyncList is a list of ManifestSyncs.
//
// +kubebuilder:object:root=true
type ManifestSyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ManifestSync `json:"items"`
}

// ManifestSyncSpec is what a ManifestSync asks for.
//
// +kubebuilder:validation:XValidation:rule="!has(self.transform) || !has(self.transform.starlark) || !has(self.transform.starlark.source) || (has(self.sources) && self.sources.exists(s, s.name == self.transform.starlark.source))",message="transform.starlark.source must name a source"
// +kubebuilder:validation:XValidation:rule="!has(self.transform) || !has(self.transform.cue) || !has(self.transform.cue.source) || (has(self.sources) && self.sources.exists(s, s.name == self.transform.cue.source))",message="transform.cue.source must name a source"
// +kubebuilder:validation:XValidation:rule="!has(self.sources) || self.sources.all(s, !has(s.kustomize) || self.sources.exists(t, t.name == s.kustomize.source && t.name != s.name))",message="a kustomize source must name another source"
// +kubebuilder:validation:XValidation:rule="!has(self.schemas) || self.schemas.all(c, !has(c.source) || (has(self.sources) && self.sources.exists(s, s.name == c.source)))",message="schemas[].source must name a source"
type ManifestSyncSpec struct {
	// Sources are the inputs, referenced by name everywhere else.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Sources []Source `json:"sources,omitempty"`

	// Transform turns the inputs into the objects of each target. Without
	// it the inputs pass through unchanged.
	// +optional
	Transform *Transform `json:"transform,omitempty"`

	// Schemas are CUE schemas every output object is unified with.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Schemas []SchemaRef `json:"schemas,omitempty"`

	// Params are given to the transform as ctx.params; a target's params
	// are merged over them.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	Params *runtime.RawExtension `json:"params,omitempty"`

	// Targets are the namespaces, of this cluster or remote ones, that get
	// the objects.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	Targets []Target `json:"targets"`

	// Policy says how objects are applied, pruned and deleted.
	// +optional
	Policy Policy `json:"policy,omitempty"`

	// Interval is the period of the re-check; source changes also trigger
	// a reconcile at once.
	// +optional
	// +kubebuilder:default="10m"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Suspend stops reconciling without deleting anything.
	// +optional
	// +kubebuilder:default=false
	Suspend bool `json:"suspend,omitempty"`

	// ServiceAccountName, when set, is impersonated for in-cluster reads
	// and writes of this ManifestSync.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// Wait makes Ready mean healthy: Ready is True only when every object
	// of every target is Current (kstatus), and a wave starts only when
	// the one before it is Current.
	// +optional
	// +kubebuilder:default=false
	Wait bool `json:"wait,omitempty"`

	// Timeout bounds the wait for health: when it passes, Ready is False
	// with reason HealthCheckFailed naming the objects that are not Current.
	// +optional
	// +kubebuilder:default="5m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// HealthChecks judge the health of kinds kstatus cannot, by CEL
	// expressions over the object.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	HealthChecks []HealthCheck `json:"healthChecks,omitempty"`

	// DependsOn are ManifestSyncs that must be Ready at their current
	// generation before anything of this one is applied.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	DependsOn []DependencyReference `json:"dependsOn,omitempty"`

	// Decryption decrypts the SOPS-encrypted files of every source before
	// the transform sees them.
	// +optional
	Decryption *Decryption `json:"decryption,omitempty"`
}

// Decryption says how the files of the sources are decrypted, as Flux's
// Kustomization spec.decryption: files SOPS encrypted (YAML, JSON,
// dotenv, INI, binary) are decrypted with the age identities of the
// Secret secretRef names (its keys ending in .agekey), read as the
// ManifestSync's service account. A file that fails to decrypt fails its
// source and nothing is applied. Decrypted values are Secret values:
// masked wherever a message would show them.
type Decryption struct {
	// Provider is sops.
	// +kubebuilder:validation:Enum=sops
	Provider string `json:"provider"`
	// SecretRef names a Secret of the ManifestSync's namespace whose
	// *.agekey entries hold age identities (AGE-SECRET-KEY-1...).
	SecretRef LocalObjectReference `json:"secretRef"`
}

// HealthCheck judges the health of one kind by CEL expressions over the
// object (bound as `self`), as Flux's healthCheckExprs: the first of
// failed, current and inProgress that is true decides; none true is
// InProgress. Without a current expression the object is Unknown.
type HealthCheck struct {
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Current is true when the object is healthy and reconciled.
	// +kubebuilder:validation:MinLength=1
	Current string `json:"current"`
	// InProgress is true while the object is still being reconciled.
	// +optional
	InProgress string `json:"inProgress,omitempty"`
	// Failed is true when the object failed.
	// +optional
	Failed string `json:"failed,omitempty"`
}

// DependencyReference names another ManifestSync.
type DependencyReference struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace defaults to the ManifestSync's own.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// Source is one named input. Exactly one of git, oci, http, object,
// objects, kustomize and helm is set; cluster, beside object or objects,
// reads them from a remote cluster.
//
// +kubebuilder:validation:XValidation:rule="[has(self.git), has(self.oci), has(self.http), has(self.object), has(self.objects), has(self.kustomize), has(self.helm)].filter(x, x).size() == 1",message="exactly one of git, oci, http, object, objects, kustomize and helm must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.cluster) || has(self.object) || has(self.objects)",message="cluster is set only with object or objects"
type Source struct {
	// Name is how the transform, schemas and other sources refer to it.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// +optional
	Git *GitSource `json:"git,omitempty"`
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
	// +optional
	HTTP *HTTPSource `json:"http,omitempty"`
	// +optional
	Object *ObjectSource `json:"object,omitempty"`
	// +optional
	Objects *ObjectSetSource `json:"objects,omitempty"`
	// +optional
	Kustomize *KustomizeSource `json:"kustomize,omitempty"`
	// +optional
	Helm *HelmSource `json:"helm,omitempty"`
	// Cluster is the remote cluster object or objects are read from, with
	// its kubeconfig's credentials; empty means this one.
	// +optional
	Cluster *ClusterRef `json:"cluster,omitempty"`
}

// GitSource is a subtree of a Git repository at a ref.
type GitSource struct {
	// URL is an https, ssh or git URL.
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// Ref selects the revision; the default is the remote's HEAD.
	// +optional
	Ref GitRef `json:"ref,omitempty"`
	// Path restricts the snapshot to this subtree.
	// +optional
	Path string `json:"path,omitempty"`
	// SecretRef names a Secret in the ManifestSync's namespace with
	// username/password, bearer token, or ssh identity and known_hosts.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// Verify, when set, requires the commit (or tag) read to carry a
	// signature by one of the keys of its Secret; an unsigned or
	// otherwise signed one fails the source with SourceVerifyFailed and
	// nothing is applied.
	// +optional
	Verify *GitVerification `json:"verify,omitempty"`
	// Build says how a path holding a kustomization.yaml is read, and
	// substitutes variables as Flux's post-build does.
	Build `json:",inline"`
}

// GitVerification is Flux's GitRepository spec.verify: which signatures
// are required, and the Secret of the keys that may make them.
type GitVerification struct {
	// Mode is HEAD (the commit read must be signed), Tag (the tag read,
	// an annotated tag, must be signed) or TagAndHEAD (both).
	// +optional
	// +kubebuilder:validation:Enum=HEAD;Tag;TagAndHEAD
	// +kubebuilder:default=HEAD
	Mode string `json:"mode,omitempty"`
	// SecretRef names a Secret of the ManifestSync's namespace whose
	// entries are public keys: ASCII-armored OpenPGP keys, or SSH public
	// keys in authorized_keys form (one or more per entry).
	SecretRef LocalObjectReference `json:"secretRef"`
}

// OCISource is an artifact of an OCI registry, as Flux's OCIRepository
// reads it: what `engine push` or `flux push artifact` published (Flux's
// config and content media types), or any artifact whose selected layer
// is a tar+gzip. The revision is TAG@sha256:DIGEST.
type OCISource struct {
	// URL is oci://HOST/REPOSITORY.
	// +kubebuilder:validation:Pattern=`^oci://[^/]+/.+`
	URL string `json:"url"`
	// Ref selects the artifact; the default is the tag latest.
	// +optional
	Ref OCIRef `json:"ref,omitempty"`
	// Path restricts the snapshot to this subtree of the artifact.
	// +optional
	Path string `json:"path,omitempty"`
	// SecretRef names a Secret of the ManifestSync's namespace with a
	// .dockerconfigjson (kubernetes.io/dockerconfigjson).
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// Insecure reads over plain http.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// LayerSelector picks the layer read; the default is the first layer,
	// extracted.
	// +optional
	LayerSelector *OCILayerSelector `json:"layerSelector,omitempty"`
	// Verify, when set, requires a signature of the artifact's digest by
	// one of the keys of its Secret; an unsigned or otherwise signed
	// artifact fails the source with SourceVerifyFailed and nothing is
	// applied.
	// +optional
	Verify *OCIVerification `json:"verify,omitempty"`
	// Build says how a path holding a kustomization.yaml is read, and
	// substitutes variables as Flux's post-build does.
	Build `json:",inline"`
}

// OCIRef selects an artifact. When several fields are set the most
// specific wins: digest, then semver, then tag.
type OCIRef struct {
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`
	Tag string `json:"tag,omitempty"`
	// SemVer is a range over the repository's tags, such as ">=1.2 <2";
	// the highest matching version is read.
	// +optional
	SemVer string `json:"semver,omitempty"`
	// SemVerFilter is a regular expression the tags semver considers
	// must match (Flux's semverFilter), such as ".*-rc.*".
	// +optional
	SemVerFilter string `json:"semverFilter,omitempty"`
	// Digest is sha256:HEX of the artifact's manifest.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Digest string `json:"digest,omitempty"`
}

// OCILayerSelector picks the first layer of MediaType (any first layer
// when empty) and extracts it (a tar+gzip) or copies it as one file.
type OCILayerSelector struct {
	// +optional
	MediaType string `json:"mediaType,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=extract;copy
	Operation string `json:"operation,omitempty"`
}

// OCIVerification is Flux's OCIRepository spec.verify with keys: cosign
// signatures checked against the public keys of a Secret.
type OCIVerification struct {
	// Provider is cosign.
	// +kubebuilder:validation:Enum=cosign
	Provider string `json:"provider"`
	// SecretRef names a Secret of the ManifestSync's namespace whose
	// *.pub entries are cosign public keys (PEM).
	SecretRef LocalObjectReference `json:"secretRef"`
}

// HTTPSource is an archive (tar+gzip or zip) downloaded over http(s), as
// go-getter's archive case: pinned by its digest, read again only when
// the server says it changed (ETag, Last-Modified).
//
// +kubebuilder:validation:XValidation:rule="has(self.digest) || (has(self.insecure) && self.insecure)",message="digest is required unless insecure is true"
type HTTPSource struct {
	// URL is an https URL; plain http only to a loopback host, with
	// insecure.
	// +kubebuilder:validation:Pattern=`^https?://.+`
	URL string `json:"url"`
	// Digest is sha256:HEX of the archive; a download of other content
	// fails the source.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Digest string `json:"digest,omitempty"`
	// Path restricts the snapshot to this subtree of the archive.
	// +optional
	Path string `json:"path,omitempty"`
	// SecretRef names a Secret of the ManifestSync's namespace with
	// username and password, or a bearer token, sent only to the URL's
	// own scheme, host and port; ca.crt, when present, is the CA bundle.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// Insecure allows plain http to a loopback host, and no digest.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// Build says how a path holding a kustomization.yaml is read, and
	// substitutes variables as Flux's post-build does.
	Build `json:",inline"`
}

// Build is how the objects of a source path are made, as Flux and Argo
// CD make them: a path holding a kustomization.yaml (or kustomization.yml,
// Kustomization) is built with kustomize, unless kustomize is false; then
// ${var} in the objects is substituted from substitute and substituteFrom
// (Flux's post-build syntax: ${var}, ${var:=default}; an object annotated
// kustomize.toolkit.fluxcd.io/substitute: disabled is left alone).
type Build struct {
	// Kustomize false reads the path's YAML files as they are, even when
	// it holds a kustomization.yaml.
	// +optional
	Kustomize *bool `json:"kustomize,omitempty"`
	// Substitute are variables by name.
	// +optional
	// +kubebuilder:validation:MaxProperties=1024
	Substitute map[string]string `json:"substitute,omitempty"`
	// SubstituteFrom are ConfigMaps and Secrets of the ManifestSync's
	// namespace whose keys are variables; a later one wins over an
	// earlier one, substitute wins over all.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	SubstituteFrom []SubstituteReference `json:"substituteFrom,omitempty"`
}

// SubstituteReference is a ConfigMap or Secret of the ManifestSync's
// namespace whose data are variables.
type SubstituteReference struct {
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	Kind string `json:"kind"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Optional lets the object be missing.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// HelmSource is a Helm chart rendered as `helm template` renders it, per
// target: from a chart repository (https, or oci://) or from a directory
// of another source.
//
// +kubebuilder:validation:XValidation:rule="has(self.chart) != has(self.source)",message="exactly one of chart and source must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.chart) || has(self.repository) || self.chart.startsWith('oci://')",message="a chart needs a repository"
// +kubebuilder:validation:XValidation:rule="!has(self.source) || !has(self.repository)",message="repository is set only with chart"
type HelmSource struct {
	// Chart is the chart's name in the repository.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Chart string `json:"chart,omitempty"`
	// Version is a semver range over the repository's versions of the
	// chart, such as "^1.2" or "1.2.3"; the default is the newest stable.
	// +optional
	Version string `json:"version,omitempty"`
	// Repository is an https Helm repository (with index.yaml) or an
	// oci:// registry path holding the chart.
	// +optional
	Repository string `json:"repository,omitempty"`
	// SecretRef names a Secret in the ManifestSync's namespace with
	// username/password (or a .dockerconfigjson for oci://).
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// Insecure allows plain http and registries without TLS.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// Source names the source that holds the chart directory.
	// +optional
	Source string `json:"source,omitempty"`
	// Path is the chart's directory inside that source.
	// +optional
	Path string `json:"path,omitempty"`

	// Values are merged last, over the chart's values.yaml and every
	// valuesFrom: they win, as Flux's values win over its valuesFrom and
	// Helm's --set over its -f files.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	Values *runtime.RawExtension `json:"values,omitempty"`
	// ValuesFrom are merged in order over values.yaml, a later one
	// winning, and under values ({params: true} at its own place).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	ValuesFrom []HelmValuesReference `json:"valuesFrom,omitempty"`
	// ReleaseName is .Release.Name; the default is the ManifestSync's name.
	// +optional
	// +kubebuilder:validation:MaxLength=53
	ReleaseName string `json:"releaseName,omitempty"`
	// Namespace is .Release.Namespace; the default is the target's namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// IncludeCRDs renders the chart's crds/ directory (default true).
	// +optional
	IncludeCRDs *bool `json:"includeCRDs,omitempty"`
}

// HelmValuesReference is one set of values: a key of a ConfigMap or
// Secret of the ManifestSync's namespace (kind, name, valuesKey), a file
// of a source (source, path), or the target's params (params: true).
//
// +kubebuilder:validation:XValidation:rule="[has(self.kind), has(self.source), has(self.params) && self.params].filter(x, x).size() == 1",message="exactly one of kind, source and params must be set"
// +kubebuilder:validation:XValidation:rule="has(self.kind) == has(self.name)",message="kind and name are set together"
// +kubebuilder:validation:XValidation:rule="has(self.source) == has(self.path)",message="source and path are set together"
type HelmValuesReference struct {
	// +optional
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// ValuesKey is the key holding YAML values (default values.yaml).
	// +optional
	ValuesKey string `json:"valuesKey,omitempty"`
	// TargetPath, when set, puts the key's whole content (a string) at
	// this dotted path of the values, as Flux's targetPath.
	// +optional
	TargetPath string `json:"targetPath,omitempty"`
	// Optional lets the object or key be missing.
	// +optional
	Optional bool `json:"optional,omitempty"`
	// +optional
	Source string `json:"source,omitempty"`
	// +optional
	Path string `json:"path,omitempty"`
	// Params true merges the target's params (spec.params with the
	// target's over them), so that each target gets its own values.
	// +optional
	Params bool `json:"params,omitempty"`
}

// GitRef selects a revision. When several fields are set the most specific
// wins: commit, then semver, then tag, then branch.
type GitRef struct {
	// +optional
	Branch string `json:"branch,omitempty"`
	// +optional
	Tag string `json:"tag,omitempty"`
	// SemVer is a range over tags, such as ">=1.2 <2".
	// +optional
	SemVer string `json:"semver,omitempty"`
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{7,40}$`
	Commit string `json:"commit,omitempty"`
}

// ObjectSource is one object of the cluster, read as an input.
type ObjectSource struct {
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Namespace defaults to the ManifestSync's namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ObjectSetSource is a set of objects of the cluster, read as inputs:
// those of one kind (apiVersion and kind) or of several (kinds), in one
// namespace or in the namespaces namespaceSelector picks, that match
// labelSelector and whose names match no exclude pattern. Without kind
// and kinds it is the whole namespace: every namespaced kind that can be
// listed, but for those made by the cluster itself (Events, Pods,
// ReplicaSets, EndpointSlices, Leases, service account token Secrets and
// objects a controller owns). Scripts see the objects as
// ctx.sources.NAME.objects, ordered by namespace, name, group and kind.
//
// +kubebuilder:validation:XValidation:rule="has(self.apiVersion) == has(self.kind)",message="apiVersion and kind are set together"
// +kubebuilder:validation:XValidation:rule="!(has(self.kind) && has(self.kinds))",message="kind and kinds are exclusive"
// +kubebuilder:validation:XValidation:rule="!(has(self.namespace) && has(self.namespaceSelector))",message="namespace and namespaceSelector are exclusive"
// +kubebuilder:validation:XValidation:rule="has(self.kind) || has(self.kinds) || !has(self.namespaceSelector)",message="the whole-namespace form (no kind, no kinds) reads one namespace: set namespace, not namespaceSelector"
type ObjectSetSource struct {
	// +optional
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind,omitempty"`
	// Kinds are the kinds read, when there are several.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Kinds []KindReference `json:"kinds,omitempty"`
	// Namespace defaults to the ManifestSync's namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// NamespaceSelector picks the namespaces read by their labels.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// LabelSelector picks the objects by their labels; empty selects all.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// Exclude are regular expressions (RE2, anchored at both ends) over
	// names: an object whose name matches one is not read.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	Exclude []string `json:"exclude,omitempty"`
}

// KindReference is a kind of objects.
type KindReference struct {
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
}

// KustomizeSource is `kustomize build` of a path inside another source.
type KustomizeSource struct {
	// Source names the source that holds the kustomization.
	// +kubebuilder:validation:MinLength=1
	Source string `json:"source"`
	// Path is the directory of the kustomization inside that source.
	// +optional
	Path string `json:"path,omitempty"`
	// Substitute and substituteFrom work as on a git source; kustomize
	// is always true here.
	// +optional
	Substitute map[string]string `json:"substitute,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=32
	SubstituteFrom []SubstituteReference `json:"substituteFrom,omitempty"`
}

// LocalObjectReference names an object in the ManifestSync's namespace.
type LocalObjectReference struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Transform is a Starlark or CUE program that produces each target's objects.
//
// +kubebuilder:validation:XValidation:rule="has(self.starlark) != has(self.cue)",message="exactly one of starlark and cue must be set"
type Transform struct {
	// +optional
	Starlark *ProgramRef `json:"starlark,omitempty"`
	// +optional
	CUE *CUEProgramRef `json:"cue,omitempty"`
}

// ProgramRef is a script in a source, or inline.
//
// +kubebuilder:validation:XValidation:rule="has(self.inline) != has(self.path)",message="exactly one of path and inline must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.path) || has(self.source)",message="path needs a source"
type ProgramRef struct {
	// Source names the source the script lives in; load() resolves there.
	// +optional
	Source string `json:"source,omitempty"`
	// Path of the script inside the source.
	// +optional
	Path string `json:"path,omitempty"`
	// Inline is the script itself.
	// +optional
	Inline string `json:"inline,omitempty"`
}

// CUEProgramRef is a CUE package in a source, or inline, and the expression
// to export from it.
type CUEProgramRef struct {
	ProgramRef `json:",inline"`
	// Expression is exported: a list or a struct of objects.
	// +optional
	// +kubebuilder:default=objects
	Expression string `json:"expression,omitempty"`
}

// SchemaRef names CUE schemas: a directory of a source, or a builtin set.
//
// +kubebuilder:validation:XValidation:rule="has(self.source) != has(self.builtin)",message="exactly one of source and builtin must be set"
type SchemaRef struct {
	// +optional
	Source string `json:"source,omitempty"`
	// +optional
	Path string `json:"path,omitempty"`
	// Builtin is the name of a schema set shipped in the binary, such as k8s.
	// +optional
	Builtin string `json:"builtin,omitempty"`
}

// Target is one destination: a namespace, or the namespaces a selector
// picks, in this cluster or a remote one (whose namespaces it picks).
//
// +kubebuilder:validation:XValidation:rule="!(has(self.namespace) && has(self.namespaceSelector))",message="namespace and namespaceSelector are exclusive"
type Target struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Namespace of namespaced objects; empty keeps the objects' own.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// NamespaceSelector picks every namespace whose labels match, of the
	// target's cluster.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Cluster is a remote cluster; empty means this one.
	// +optional
	Cluster *ClusterRef `json:"cluster,omitempty"`
	// Labels are given to the transform as ctx.target.labels.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Params are merged over spec.params; the target wins.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	Params *runtime.RawExtension `json:"params,omitempty"`
	// Patches are static overrides applied after the transform.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Patches []Patch `json:"patches,omitempty"`
}

// ClusterRef points at a remote cluster.
type ClusterRef struct {
	// KubeConfigSecretRef names a Secret in the ManifestSync's namespace
	// and the key holding a kubeconfig.
	KubeConfigSecretRef SecretKeyReference `json:"kubeConfigSecretRef"`
}

// SecretKeyReference names a key of a Secret in the ManifestSync's namespace.
type SecretKeyReference struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +optional
	// +kubebuilder:default=value
	Key string `json:"key,omitempty"`
}

// Patch is a strategic-merge patch (a YAML object) or a JSON6902 patch (a
// YAML list of operations), applied to the objects its selector picks.
type Patch struct {
	// +kubebuilder:validation:MinLength=1
	Patch string `json:"patch"`
	// Target selects the objects; empty selects by the patch's own
	// apiVersion, kind and name (strategic merge) or every object (JSON6902).
	// +optional
	Target *PatchSelector `json:"target,omitempty"`
}

// PatchSelector picks objects by group, version, kind, name, namespace,
// labels and annotations. Name and namespace are regular expressions,
// anchored at both ends.
type PatchSelector struct {
	// +optional
	Group string `json:"group,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`
	// +optional
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}

// ResourcePolicy says what happens to an object that exists already.
// +kubebuilder:validation:Enum=Sync;Keep;Adopt;Overwrite
type ResourcePolicy string

const (
	// PolicySync creates or updates objects this ManifestSync owns; an object
	// owned by nobody or someone else is a conflict.
	PolicySync ResourcePolicy = "Sync"
	// PolicyKeep creates absent objects and never modifies existing ones.
	PolicyKeep ResourcePolicy = "Keep"
	// PolicyAdopt takes over an existing object.
	PolicyAdopt ResourcePolicy = "Adopt"
	// PolicyOverwrite makes the live object exactly the desired one.
	PolicyOverwrite ResourcePolicy = "Overwrite"
)

// DeletionPolicy says what happens to the targets' objects when the
// ManifestSync is deleted.
// +kubebuilder:validation:Enum=Delete;Orphan
type DeletionPolicy string

const (
	DeletionDelete DeletionPolicy = "Delete"
	DeletionOrphan DeletionPolicy = "Orphan"
)

// DriftPolicy says what happens when someone edits a managed object.
// +kubebuilder:validation:Enum=Correct;Report;Ignore
type DriftPolicy string

const (
	DriftCorrect DriftPolicy = "Correct"
	DriftReport  DriftPolicy = "Report"
	DriftIgnore  DriftPolicy = "Ignore"
)

// Policy says how objects are applied, pruned and deleted.
type Policy struct {
	// +optional
	// +kubebuilder:default=Sync
	Resources ResourcePolicy `json:"resources,omitempty"`
	// Prune deletes objects that are no longer desired.
	// +optional
	// +kubebuilder:default=true
	Prune *bool `json:"prune,omitempty"`
	// +optional
	// +kubebuilder:default=Delete
	Deletion DeletionPolicy `json:"deletion,omitempty"`
	// +optional
	// +kubebuilder:default=Correct
	Drift DriftPolicy `json:"drift,omitempty"`
	// AllowEmpty lets a target whose evaluation turns empty (no objects)
	// while its inventory is not prune that inventory. Without it such a
	// target is left alone, nothing pruned and nothing applied, and the
	// ManifestSync is Ready=False with reason EmptyOutput: a transform
	// that returns nothing by mistake must not delete everything.
	// +optional
	AllowEmpty bool `json:"allowEmpty,omitempty"`
}

// Condition types and reasons of a ManifestSync.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"

	ReasonSynced           = "Synced"
	ReasonSourceFailed     = "SourceFailed"
	ReasonEvalFailed       = "EvalFailed"
	ReasonValidationFailed = "ValidationFailed"
	ReasonApplyFailed      = "ApplyFailed"
	ReasonConflict         = "Conflict"
	// ReasonEmptyOutput: a target's evaluation turned empty while its
	// inventory is not, and spec.policy.allowEmpty is false; nothing of
	// it was pruned.
	ReasonEmptyOutput = "EmptyOutput"
	// ReasonInventoryInvalid: status.inventoryGzip cannot be read; nothing
	// is applied or pruned until it is fixed.
	ReasonInventoryInvalid = "InventoryInvalid"
	// ReasonServiceAccountRequired: the operator requires
	// spec.serviceAccountName and the ManifestSync has none.
	ReasonServiceAccountRequired = "ServiceAccountRequired"
	// ReasonTargetNotAllowed: the write gate refused a target of a
	// ManifestSync without a service account, of a namespace that is not
	// trusted (an object in a namespace that does not allow it, a
	// cluster-scoped object, RBAC granting more than it has); nothing of
	// that target was applied.
	ReasonTargetNotAllowed = "TargetNotAllowed"
	// ReasonHookFailed: a hook (Helm's helm.sh/hook or Argo CD's
	// argocd.argoproj.io/hook) of a target failed or did not finish in
	// time; the phases after it were not applied and the SyncFail hooks ran.
	ReasonHookFailed = "HookFailed"
	// ReasonSourceVerifyFailed: a source's verify found no signature by
	// its keys on the commit, tag or artifact read; nothing was applied.
	ReasonSourceVerifyFailed = "SourceVerifyFailed"

	// ConditionHealthy is True when every applied object is Current.
	ConditionHealthy = "Healthy"
	// ReasonHealthCheckFailed: spec.timeout passed before every object
	// was Current.
	ReasonHealthCheckFailed = "HealthCheckFailed"
	// ReasonProgressing: the objects were applied and some are not
	// Current yet.
	ReasonProgressing = "Progressing"
	// ReasonDependencyNotReady: a ManifestSync of spec.dependsOn is not
	// Ready at its current generation; nothing was applied.
	ReasonDependencyNotReady = "DependencyNotReady"
	// ReasonDependencyCycle: spec.dependsOn leads back to this
	// ManifestSync; nothing was applied.
	ReasonDependencyCycle = "DependencyCycle"
)

// Health is the health of a target's objects taken together.
// +kubebuilder:validation:Enum=Healthy;Progressing;Degraded;Unknown
type Health string

const (
	// HealthHealthy: every object is Current.
	HealthHealthy Health = "Healthy"
	// HealthProgressing: some object is InProgress, none Failed.
	HealthProgressing Health = "Progressing"
	// HealthDegraded: some object Failed (or did not become Current
	// within spec.timeout).
	HealthDegraded Health = "Degraded"
	// HealthUnknown: some object's health cannot be judged (no status and
	// no health check), or it is not found.
	HealthUnknown Health = "Unknown"
)

// ManifestSyncStatus is what the operator observed and did.
type ManifestSyncStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastEvaluatedRevision is a digest over every input evaluated last.
	// +optional
	LastEvaluatedRevision string `json:"lastEvaluatedRevision,omitempty"`
	// LastAppliedRevision is the input digest last applied to every target.
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`
	// ShortRevision is LastAppliedRevision, short, for kubectl get.
	// +optional
	ShortRevision string `json:"shortRevision,omitempty"`
	// TargetsSummary is "synced/total", for kubectl get.
	// +optional
	TargetsSummary string `json:"targetsSummary,omitempty"`
	// Inputs records exactly what was evaluated.
	// +optional
	Inputs *Inputs `json:"inputs,omitempty"`
	// Targets has one row per target.
	// +optional
	Targets []TargetStatus `json:"targets,omitempty"`
	// Inventory lists every object applied, for pruning. A large one is
	// written as InventoryGzip instead, and this is empty: read both with
	// ManifestSync.InventoryEntries.
	// +optional
	Inventory []InventoryEntry `json:"inventory,omitempty"`
	// InventoryGzip is the inventory, gzipped JSON of the array of
	// entries, when its JSON is larger than the operator's threshold
	// (256 KiB by default), so that the status of a large fan-out fits in
	// the API server's request limit.
	// +optional
	InventoryGzip []byte `json:"inventoryGzip,omitempty"`
	// InventoryCount is how many entries InventoryGzip holds.
	// +optional
	InventoryCount int `json:"inventoryCount,omitempty"`
	// History keeps the last 10 evaluated revisions, newest first.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	History []HistoryEntry `json:"history,omitempty"`
	// +optional
	LastSuccessfulSyncTime *metav1.Time `json:"lastSuccessfulSyncTime,omitempty"`
}

// Inputs are the digests and revisions of everything one evaluation read.
type Inputs struct {
	// Sources maps each source name to its revision.
	// +optional
	Sources map[string]string `json:"sources,omitempty"`
	// Transform is a digest of the script and every file it loaded.
	// +optional
	Transform string `json:"transform,omitempty"`
	// +optional
	Schemas string `json:"schemas,omitempty"`
	// +optional
	Params string `json:"params,omitempty"`
}

// TargetState is the outcome of one target's last sync.
type TargetState string

const (
	TargetSynced   TargetState = "Synced"
	TargetFailed   TargetState = "Failed"
	TargetConflict TargetState = "Conflict"
	TargetPending  TargetState = "Pending"
)

// TargetStatus is one target's row.
type TargetStatus struct {
	Name string `json:"name"`
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// +optional
	Namespace string      `json:"namespace,omitempty"`
	State     TargetState `json:"state"`
	// +optional
	Objects int `json:"objects"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// Health of the target's objects taken together.
	// +optional
	Health Health `json:"health,omitempty"`
	// Hooks is how the target's hooks ran for its current output.
	// +optional
	Hooks *HookStatus `json:"hooks,omitempty"`
}

// HookStatus is the run of a target's hooks for one output: hooks run once
// per output digest, phase by phase (PreSync, Sync, PostSync; SyncFail
// after a failure).
type HookStatus struct {
	// Digest is the target's output digest the hooks ran for.
	Digest string `json:"digest"`
	// Phase is the phase reached: PreSync, Sync, PostSync, Succeeded,
	// or Failed (after SyncFail).
	Phase string `json:"phase"`
	// Message names the hook that failed, with its message.
	// +optional
	Message string `json:"message,omitempty"`
	// Names are the hooks created for this run (kind namespace/name), so
	// that their delete policies can be honoured after it.
	// +optional
	Names []string `json:"names,omitempty"`
}

// InventoryEntry is one applied object: its id is
// namespace_name_group_kind (ObjectID's inventory form), v its version.
type InventoryEntry struct {
	ID      string `json:"id"`
	Version string `json:"v"`
	// +optional
	Target string `json:"target,omitempty"`
	// Cluster is the remote cluster the object is in, as its kubeconfig
	// Secret "<name>/<key>"; empty for this cluster.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Missing is set when the object was deleted by someone else and,
	// under spec.policy.drift Report or Ignore, not re-created: it stays
	// in the inventory so that pruning and status still know it.
	// +optional
	Missing bool `json:"missing,omitempty"`
	// Drifted is set when the object was changed by someone else and,
	// under spec.policy.drift Report or Ignore, left so; the next apply
	// of the object clears it.
	// +optional
	Drifted bool `json:"drifted,omitempty"`
	// Fields is a digest of the fields the operator owned in the object
	// after its last apply (or when it found it drifted): a change of
	// them is drift. It tells a restarted operator whether the object
	// drifted while it was away, so that it need not apply it again.
	// +optional
	Fields string `json:"fields,omitempty"`
}

// HistoryEntry is one evaluated revision.
type HistoryEntry struct {
	Revision string `json:"revision"`
	// +optional
	Inputs *Inputs `json:"inputs,omitempty"`
	// +optional
	OutputDigest string `json:"outputDigest,omitempty"`
	// +optional
	Time metav1.Time `json:"time,omitempty"`
	// +optional
	Result string `json:"result,omitempty"`
}
