module github.com/captf/captf/hack/tools/walk

go 1.26.0
