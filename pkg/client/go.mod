module github.com/tetherjobs/tether/pkg/client

go 1.22

require (
	github.com/stretchr/testify v1.8.3
	github.com/tetherjobs/tether/pkg/api v0.0.0
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/tetherjobs/tether/pkg/api => ../api
