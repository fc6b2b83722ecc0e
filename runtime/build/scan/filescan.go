package scan

import (
	"encoding/json"
	"fmt"
	"strings"
)

type trivyOutput struct {
	Results []struct {
		Vulnerabilities []struct {
			VulnerabilityID  string `json:"VulnerabilityID"`
			PkgName          string `json:"PkgName"`
			InstalledVersion string `json:"InstalledVersion"`
			FixedVersion     string `json:"FixedVersion"`
			Severity         string `json:"Severity"`
			Title            string `json:"Title"`
		} `json:"Vulnerabilities"`
	} `json:"Results"`
}

func parseTrivy(out []byte) (Report, error) {
	var doc trivyOutput
	if err := json.Unmarshal(out, &doc); err != nil {
		return Report{}, fmt.Errorf("%w: trivy printed no JSON report: %v", ErrScanner, err)
	}
	r := Report{Scanned: true}
	for _, res := range doc.Results {
		for _, v := range res.Vulnerabilities {
			f := Finding{Package: clip(v.PkgName, 128), Version: clip(v.InstalledVersion, 64), ID: clip(v.VulnerabilityID, 64),
				Severity: severity(v.Severity), Summary: clip(v.Title, 200)}
			if v.FixedVersion != "" {
				f.Fixed = clipAll(strings.Split(v.FixedVersion, ", "))
			}
			r.Findings = append(r.Findings, f)
		}
	}
	r.Note = fmt.Sprintf("scanned with trivy: %d known vulnerabilities", len(r.Findings))
	return r, nil
}

type grypeOutput struct {
	Matches []struct {
		Vulnerability struct {
			ID          string `json:"id"`
			Severity    string `json:"severity"`
			Description string `json:"description"`
			Fix         struct {
				Versions []string `json:"versions"`
			} `json:"fix"`
		} `json:"vulnerability"`
		Artifact struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"artifact"`
	} `json:"matches"`
}

func parseGrype(out []byte) (Report, error) {
	var doc grypeOutput
	if err := json.Unmarshal(out, &doc); err != nil {
		return Report{}, fmt.Errorf("%w: grype printed no JSON report: %v", ErrScanner, err)
	}
	r := Report{Scanned: true}
	for _, m := range doc.Matches {
		v := m.Vulnerability
		r.Findings = append(r.Findings, Finding{Package: clip(m.Artifact.Name, 128), Version: clip(m.Artifact.Version, 64),
			ID: clip(v.ID, 64), Severity: severity(v.Severity), Fixed: clipAll(v.Fix.Versions), Summary: clip(firstSentence(v.Description), 200)})
	}
	r.Note = fmt.Sprintf("scanned with grype: %d known vulnerabilities", len(r.Findings))
	return r, nil
}

// severity maps a scanner's word (CRITICAL, High, negligible, ...) to ours.
func severity(s string) Severity {
	switch v := Severity(strings.ToLower(s)); v {
	case SeverityCritical, SeverityHigh, SeverityMedium, SeverityLow:
		return v
	case "negligible":
		return SeverityLow
	}
	return SeverityUnknown
}
