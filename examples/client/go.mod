module github.com/tetherjobs/tether/examples/client

go 1.22

require (
	github.com/tetherjobs/tether/pkg/api v0.0.0
	github.com/tetherjobs/tether/pkg/client v0.0.0
)

replace (
	github.com/tetherjobs/tether/pkg/api => ../../pkg/api
	github.com/tetherjobs/tether/pkg/client => ../../pkg/client
)
