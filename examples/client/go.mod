module github.com/tetherjobs/tether/examples/client

go 1.26.0

require github.com/tetherjobs/tether v0.0.0-00010101000000-000000000000

replace github.com/tetherjobs/tether => ../..
