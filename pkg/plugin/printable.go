package plugin

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// printableWriter writes what it is given with every character a terminal would
// act on or hide shown as an escape instead: control characters but newline
// and tab (an escape sequence could clear the screen and draw another plan
// above the approve prompt), bidi overrides and zero-width characters
// (Unicode format characters), and bytes that are not UTF-8 (a lone C1
// byte is a control sequence to some terminals). Records, logs and
// statuses hold what module code wrote: each byte of them passes here.
type printableWriter struct {
	w io.Writer
	// pending is the start of a character a Write ended within.
	pending []byte
}

func newPrintable(w io.Writer) *printableWriter { return &printableWriter{w: w} }

func (p *printableWriter) Write(b []byte) (int, error) {
	data := append(p.pending, b...)
	p.pending = nil
	out := make([]byte, 0, len(data))
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			if !utf8.FullRune(data) {
				p.pending = append([]byte(nil), data...) // the rest comes with the next Write
				break
			}
			out = fmt.Appendf(out, `\x%02x`, data[0])
			data = data[1:]
			continue
		}
		out = appendPrintable(out, r, data[:size])
		data = data[size:]
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush writes, escaped, what is left of a character cut short.
func (p *printableWriter) Flush() error {
	var out []byte
	for _, c := range p.pending {
		out = fmt.Appendf(out, `\x%02x`, c)
	}
	p.pending = nil
	if len(out) == 0 {
		return nil
	}
	_, err := p.w.Write(out)
	return err
}

// appendPrintable appends r (encoded as raw) or its escape.
func appendPrintable(out []byte, r rune, raw []byte) []byte {
	switch {
	case r == '\n' || r == '\t':
	case r < 0x100 && unicode.IsControl(r):
		return fmt.Appendf(out, `\x%02x`, r)
	case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r), r == utf8.RuneError:
		if r > 0xffff { // as JSON writes it: a surrogate pair
			hi, lo := utf16.EncodeRune(r)
			return fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		}
		return fmt.Appendf(out, `\u%04x`, r)
	}
	return append(out, raw...)
}
