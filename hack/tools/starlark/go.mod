module github.com/manifestsync/manifestsync/hack/tools/starlark

go 1.26

tool go.starlark.net/cmd/starlark

require (
	github.com/chzyer/readline v1.5.1 // indirect
	go.starlark.net v0.0.0-20260908191801-89a6a09411d5 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/term v0.41.0 // indirect
)
