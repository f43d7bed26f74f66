package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
)

const kindHiCacheDeployment = "HiCacheDeployment"

var apiVersionHiCache = hicachev1alpha1.GroupVersion.String()

// source is one input file, or "-" for standard input.
type source struct {
	name string
	in   io.Reader // read when name is "-"
}

// displayName is how errors name the source.
func (s source) displayName() string {
	if s.name == "-" {
		return "<stdin>"
	}
	return s.name
}

// loaded is one HiCacheDeployment read from a source, defaults applied.
type loaded struct {
	hcd *hicachev1alpha1.HiCacheDeployment
	// source is the file, and the document when the file holds several.
	source string
	// where names the object for messages: source and the object's name.
	where string
}

// loadDeployments reads every HiCacheDeployment of a YAML (or JSON) source: one document,
// several separated by "---", or a v1 List such as "kubectl get hcd -o yaml" prints. Documents
// of other kinds are skipped, but a source with no HiCacheDeployment at all is an error. Fields
// are decoded strictly: an unknown or duplicate field is an error naming its path.
func loadDeployments(src source) ([]loaded, error) {
	data, err := readSource(src)
	if err != nil {
		return nil, err
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.displayName(), err)
	}
	var (
		out   []loaded
		other []string
	)
	for i, doc := range docs {
		where := src.displayName()
		if len(docs) > 1 {
			where = fmt.Sprintf("%s (document %d)", where, i+1)
		}
		objs, kinds, err := decodeDocument(doc, where)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
		other = append(other, kinds...)
	}
	if len(out) == 0 {
		if len(other) == 0 {
			return nil, fmt.Errorf("%s: no HiCacheDeployment found: the file is empty", src.displayName())
		}
		if len(other) == 1 {
			return nil, fmt.Errorf("%s: kind is %s, not %s: give a HiCacheDeployment of %s",
				src.displayName(), other[0], kindHiCacheDeployment, apiVersionHiCache)
		}
		return nil, fmt.Errorf("%s: holds %s but no %s: give a HiCacheDeployment of %s",
			src.displayName(), strings.Join(other, ", "), kindHiCacheDeployment, apiVersionHiCache)
	}
	return out, nil
}

func readSource(src source) ([]byte, error) {
	if src.name == "-" {
		if src.in == nil {
			return nil, errors.New("<stdin>: no standard input to read")
		}
		b, err := io.ReadAll(src.in)
		if err != nil {
			return nil, fmt.Errorf("<stdin>: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(src.name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: no such file", src.name)
		}
		return nil, err
	}
	return b, nil
}

// splitDocuments splits a multi-document YAML stream, dropping documents that hold nothing.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		docs = append(docs, doc)
	}
}

// stripComments drops whole-line YAML comments, to tell an empty document from one with content.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.Lines(doc) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			continue
		}
		b.Write(line)
	}
	return b.Bytes()
}

// header is the part of a document that says what it is.
type header struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// decodeDocument decodes one YAML document: a HiCacheDeployment, a List of objects, or an
// object of another kind (returned by kind, to be reported if nothing else is found).
func decodeDocument(doc []byte, where string) ([]loaded, []string, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		// The YAML decoder lists its errors on several lines; one line reads better after "error:".
		return nil, nil, fmt.Errorf("%s: not valid YAML: %s", where, strings.Join(strings.Fields(err.Error()), " "))
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, nil, nil
	}
	var h header
	if err := json.Unmarshal(js, &h); err != nil {
		return nil, nil, fmt.Errorf("%s: not a Kubernetes object: %w", where, err)
	}
	switch {
	case h.Kind == "":
		return nil, nil, fmt.Errorf("%s: kind is missing: set kind: %s and apiVersion: %s", where, kindHiCacheDeployment, apiVersionHiCache)
	case h.Kind == "List" || (strings.HasSuffix(h.Kind, "List") && h.Items != nil):
		var (
			out   []loaded
			other []string
		)
		for i, item := range h.Items {
			objs, kinds, err := decodeObject(item, fmt.Sprintf("%s items[%d]", where, i))
			if err != nil {
				return nil, nil, err
			}
			out = append(out, objs...)
			other = append(other, kinds...)
		}
		return out, other, nil
	}
	return decodeObject(js, where)
}

// decodeObject decodes one JSON object: a HiCacheDeployment, strictly, or the name of its kind.
func decodeObject(js []byte, where string) ([]loaded, []string, error) {
	var h header
	if err := json.Unmarshal(js, &h); err != nil {
		return nil, nil, fmt.Errorf("%s: not a Kubernetes object: %w", where, err)
	}
	if h.Kind != kindHiCacheDeployment {
		if h.Kind == "" {
			return nil, nil, fmt.Errorf("%s: kind is missing: set kind: %s and apiVersion: %s", where, kindHiCacheDeployment, apiVersionHiCache)
		}
		return nil, []string{h.Kind}, nil
	}
	if h.APIVersion != apiVersionHiCache {
		return nil, nil, fmt.Errorf("%s: apiVersion is %q: this plugin reads %s of %s", where, h.APIVersion, kindHiCacheDeployment, apiVersionHiCache)
	}
	hcd, err := admit(js, where)
	if err != nil {
		return nil, nil, err
	}
	it := loaded{hcd: hcd, source: where, where: where}
	if name := hcd.Name; name != "" {
		it.where = fmt.Sprintf("%s: HiCacheDeployment %q", where, name)
	}
	return []loaded{it}, nil, nil
}

// defaultNamespace is the namespace a file without one is checked in, as kubectl apply would
// create it in the context's namespace.
const defaultNamespace = "default"

// admit checks one HiCacheDeployment as the API server would check its creation, with the CRD
// itself (its schema, defaults and CEL rules), and decodes it with the defaults filled in. A
// refusal is the server's message, word for word. Unknown fields are an error too, as with
// kubectl apply's strict field validation.
func admit(js []byte, where string) (*hicachev1alpha1.HiCacheDeployment, error) {
	obj, err := createRequest(js)
	if err != nil {
		return nil, fmt.Errorf("%s: not a Kubernetes object: %w", where, err)
	}
	v, err := crdvalidation.Default()
	if err != nil {
		return nil, fmt.Errorf("loading the HiCacheDeployment CRD: %w", err)
	}
	obj, errs, err := v.Admit(context.Background(), obj, defaultNamespace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", where, crdvalidation.Invalid(u.GroupVersionKind(), u.GetName(), errs))
	}
	hcd := &hicachev1alpha1.HiCacheDeployment{}
	strict, err := kjson.UnmarshalStrict(js, hcd)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", where, decodeMessage(err))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s: %s: remove it or fix its spelling (field names are case-sensitive)", where, strings.Join(msgs, "; "))
	}
	defaulted, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	hcd = &hicachev1alpha1.HiCacheDeployment{}
	if err := json.Unmarshal(defaulted, hcd); err != nil {
		return nil, fmt.Errorf("%s: %s", where, decodeMessage(err))
	}
	return hcd, nil
}

// createRequest is the object a create request of js would carry: what the server keeps of its
// metadata on create (the name, the namespace, labels and annotations; uid, resourceVersion and
// the like are the server's).
func createRequest(js []byte) (map[string]any, error) {
	obj := map[string]any{}
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, err
	}
	if m, ok := obj["metadata"].(map[string]any); ok {
		kept := map[string]any{}
		for _, k := range []string{"name", "generateName", "namespace", "labels", "annotations"} {
			if v, ok := m[k]; ok {
				kept[k] = v
			}
		}
		obj["metadata"] = kept
	}
	return obj, nil
}

// typeErrorRE matches the JSON decoder's type errors, such as "json: cannot unmarshal string into
// Go struct field TopologySpec.spec.topology.tensorParallel of type int32".
var typeErrorRE = regexp.MustCompile(`cannot unmarshal (\w+) into Go struct field \w*\.(\S+) of type (\S+)`)

// decodeMessage turns a JSON type error into words that name the field.
func decodeMessage(err error) string {
	if m := typeErrorRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("%s: a %s cannot go into a field of type %s", m[2], m[1], m[3])
	}
	return err.Error()
}
