package suite

// Gomega's formatting of API objects, as the release's own suite sets it.
import _ "k8s.io/kubernetes/test/utils/ktesting/format"
