// Package dbsecret reads the database credentials from AWS Secrets Manager
// (database_secret) and applies them to database_url.
//
// A secret's SecretString is one of:
//   - a PostgreSQL URL (postgres:// or postgresql://): the whole database_url,
//     which must then be unset;
//   - a JSON object with "password" and optionally "username", "host",
//     "port" and "dbname": what RDS stores for a master user it manages
//     (username, password) and what the rotation templates store (with
//     engine, host, port, dbname). The user name and password replace those
//     of database_url; host, port and dbname are used only when
//     database_url is unset;
//   - anything else: the password alone.
//
// https://docs.aws.amazon.com/secretsmanager/latest/userguide/reference_secret_json_structure.html
// https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/rds-secrets-manager.html
package dbsecret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// readTimeout bounds one GetSecretValue, retries included.
const readTimeout = 30 * time.Second

// Getter is the Secrets Manager call the package makes.
type Getter interface {
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// NewClient is a Secrets Manager client from the SDK's default chain
// (AWS_REGION, the task role's credentials, AWS_ENDPOINT_URL). The region
// of a secret given by ARN is the ARN's.
func NewClient(ctx context.Context, secretID string) (*secretsmanager.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if r := arnRegion(secretID); r != "" {
		opts = append(opts, awsconfig.WithRegion(r))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("database_secret: loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("database_secret: no AWS region: give the secret's ARN or set AWS_REGION")
	}
	return secretsmanager.NewFromConfig(cfg), nil
}

// arnRegion is the region of arn:aws:secretsmanager:REGION:…, or "".
func arnRegion(id string) string {
	parts := strings.Split(id, ":")
	if len(parts) < 7 || parts[0] != "arn" || parts[2] != "secretsmanager" {
		return ""
	}
	return parts[3]
}

// Resolve reads the secret's AWSCURRENT value and returns databaseURL with
// it applied (Apply). Errors name database_secret and never quote the value.
func Resolve(ctx context.Context, c Getter, secretID, databaseURL string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	out, err := c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(secretID)})
	if err != nil {
		return "", fmt.Errorf("database_secret: reading secret %s: %w", secretID, err)
	}
	if out.SecretString == nil {
		return "", fmt.Errorf("database_secret: secret %s has no SecretString (a binary secret): store the password, a JSON object or a URL as text", secretID)
	}
	u, err := Apply(*out.SecretString, databaseURL)
	if err != nil {
		return "", fmt.Errorf("database_secret: secret %s (version %s): %w", secretID, aws.ToString(out.VersionId), err)
	}
	return u, nil
}

// secretJSON is the JSON form of a secret.
type secretJSON struct {
	Username string          `json:"username"`
	Password *string         `json:"password"`
	Host     string          `json:"host"`
	Port     json.RawMessage `json:"port"` // a number (RDS) or a string
	DBName   string          `json:"dbname"`
}

// Apply returns the database URL that value (a secret's SecretString)
// makes of databaseURL. The errors never quote either.
func Apply(value, databaseURL string) (string, error) {
	v := strings.TrimSpace(value)
	switch {
	case strings.HasPrefix(v, "postgres://"), strings.HasPrefix(v, "postgresql://"):
		if databaseURL != "" {
			return "", errors.New("the secret is a whole database URL and database_url (DATABASE_URL) is set too: unset one of them")
		}
		return v, nil
	case strings.HasPrefix(v, "{"):
		var c secretJSON
		if err := json.Unmarshal([]byte(v), &c); err != nil {
			return "", fmt.Errorf("the secret starts with { but is not a JSON object (value not shown): %s", jsonProblem(err))
		}
		if c.Password == nil || *c.Password == "" {
			return "", errors.New(`the secret's JSON has no "password"`)
		}
		return withCredentials(databaseURL, c)
	case v == "":
		return "", errors.New("the secret is empty")
	default:
		return withCredentials(databaseURL, secretJSON{Password: &value})
	}
}

// jsonProblem describes a JSON error without the value's text.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%q must be a %s", te.Field, te.Type)
	}
	return "malformed"
}

// withCredentials sets the user name (when the secret has one) and password
// on databaseURL, or builds the URL from the secret's host when
// databaseURL is unset.
func withCredentials(databaseURL string, c secretJSON) (string, error) {
	if databaseURL == "" {
		return fromParts(c)
	}
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("database_url must be a postgres:// URL for database_secret to set its password (a keyword/value string is not changed)")
	}
	user := c.Username
	if user == "" {
		user = u.User.Username()
	}
	if user == "" {
		return "", errors.New(`no user name: put it in database_url (postgres://USER@host/db) or "username" in the secret`)
	}
	u.User = url.UserPassword(user, *c.Password)
	return u.String(), nil
}

// fromParts builds postgres://username:password@host:port/dbname from a
// rotation template's secret.
func fromParts(c secretJSON) (string, error) {
	if c.Host == "" || c.Username == "" {
		return "", errors.New(`database_url is unset and the secret has no "host" and "username": set database_url to postgres://host:5432/db?sslmode=verify-full (an RDS-managed secret holds only the user name and password)`)
	}
	port := strings.Trim(string(c.Port), `"`)
	if port == "" {
		port = "5432"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", errors.New(`the secret's "port" must be a number from 1 to 65535`)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(c.Username, *c.Password), Host: net.JoinHostPort(c.Host, port), Path: "/" + c.DBName}
	return u.String(), nil
}
