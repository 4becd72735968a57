package gateway

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/core/catalog"
	"github.com/switchyard-ai/switchyard/subjects"
)

// Keys maps API keys to tenants. Keys are held as SHA-256 digests so that
// a lookup's timing depends on the digest, not on how many leading bytes
// of a guessed key are right, and so a heap dump does not hold the keys.
type Keys struct {
	byDigest map[[32]byte]string
}

// tenantFile is the gateway's view of the tenant config file: the admitter
// owns the other fields (profiles, quotas, priorities); the gateway decodes
// only api_keys and ignores the rest.
type tenantFile struct {
	APIKeys map[string]string `json:"api_keys"`
}

// ParseKeys reads the api_keys object {key: tenant} from a tenant config
// document. Every tenant must be a valid subject token, because it becomes
// one (sy.submit.<tenant>).
func ParseKeys(data []byte) (Keys, error) {
	var f tenantFile
	if err := json.Unmarshal(data, &f); err != nil {
		return Keys{}, fmt.Errorf("tenant config: %w", err)
	}
	k := Keys{byDigest: make(map[[32]byte]string, len(f.APIKeys))}
	// Sorted so the first error reported is the same on every run.
	keys := make([]string, 0, len(f.APIKeys))
	for key := range f.APIKeys {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		tenant := f.APIKeys[key]
		if strings.TrimSpace(key) == "" {
			return Keys{}, fmt.Errorf("tenant config: api_keys has an empty key")
		}
		if !subjects.ValidToken(tenant) {
			return Keys{}, fmt.Errorf("tenant config: api key %s… maps to %q, which is not a valid tenant name (no '.', '*', '>' or spaces)", redact(key), tenant)
		}
		k.byDigest[sha256.Sum256([]byte(key))] = tenant
	}
	return k, nil
}

// LoadKeys reads the api_keys of the tenant config file at path.
func LoadKeys(path string) (Keys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Keys{}, fmt.Errorf("read tenant config: %w", err)
	}
	k, err := ParseKeys(data)
	if err != nil {
		return Keys{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// KeysFromMap builds Keys from a {key: tenant} map (tests, embedding).
func KeysFromMap(m map[string]string) (Keys, error) {
	b, err := json.Marshal(tenantFile{APIKeys: m})
	if err != nil {
		return Keys{}, err
	}
	return ParseKeys(b)
}

// Tenant returns the tenant of an API key.
func (k Keys) Tenant(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	t, ok := k.byDigest[sha256.Sum256([]byte(key))]
	return t, ok
}

// Len is the number of keys.
func (k Keys) Len() int { return len(k.byDigest) }

func redact(key string) string {
	if len(key) > 4 {
		return key[:4]
	}
	return ""
}

// BearerKey extracts the key from an Authorization header value.
func BearerKey(authorization string) (string, bool) {
	const p = "bearer "
	if len(authorization) <= len(p) || !strings.EqualFold(authorization[:len(p)], p) {
		return "", false
	}
	key := strings.TrimSpace(authorization[len(p):])
	return key, key != ""
}

// AutoModel is the model name that lets Switchyard choose (the Move
// quadrant); it is listed with the catalog's models.
const AutoModel = "auto"

// Models lists the catalog's models, plus "auto", in OpenAI's shape.
// created is fixed at 0: the catalog has no publication dates, and a
// changing number would make the list differ between gateway replicas.
func Models(ms []catalog.Model) ModelList {
	out := ModelList{Object: ObjectList, Data: make([]ModelObject, 0, len(ms)+1)}
	out.Data = append(out.Data, ModelObject{ID: AutoModel, Object: ObjectModel, OwnedBy: "switchyard"})
	for _, m := range ms {
		owner := m.Family
		if owner == "" {
			owner = "switchyard"
		}
		out.Data = append(out.Data, ModelObject{ID: m.Name, Object: ObjectModel, OwnedBy: owner, MaxContext: m.MaxContext})
	}
	return out
}
