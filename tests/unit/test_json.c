/* test_json.c — the strict JSON parser (values, numbers, escapes, UTF-8, limits, every class
 * of invalid input), the JSON string escaper and the strbuf it writes into. */
#include "ckpt.h"
#include "util/arena.h"
#include "util/json.h"
#include "util/strbuf.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const ck_json *parse(ck_arena *a, const char *text, ckpt_status want) {
    const ck_json *v = NULL;
    ckpt_error err = {0};
    ckpt_status st = ck_json_parse(a, text, strlen(text), 0, &v, &err);
    cr_assert_eq(st, want, "'%s': got %d (%s)", text, st, err.message);
    if (st == CKPT_OK) cr_assert_not_null(v);
    return v;
}

Test(json, scalars) {
    ck_arena *a = ck_arena_new(0);
    cr_assert_eq(parse(a, "null", CKPT_OK)->type, CK_JSON_NULL);
    const ck_json *v = parse(a, " true ", CKPT_OK);
    cr_assert(v->type == CK_JSON_BOOL && v->boolean);
    v = parse(a, "\t\r\nfalse", CKPT_OK);
    cr_assert(v->type == CK_JSON_BOOL && !v->boolean);
    v = parse(a, "\"hi\"", CKPT_OK);
    cr_assert_eq(v->type, CK_JSON_STRING);
    cr_assert_str_eq(v->u.str, "hi");
    cr_assert_eq(v->len, 2);
    v = parse(a, "\"\"", CKPT_OK);
    cr_assert(v->len == 0 && v->u.str[0] == 0);
    ck_arena_free(a);
}

Test(json, numbers) {
    ck_arena *a = ck_arena_new(0);
    static const struct {
        const char *t;
        bool is_int;
        int64_t i;
        double d;
    } cases[] = {
        {"0", true, 0, 0.0},
        {"-0", true, 0, -0.0},
        {"7", true, 7, 7.0},
        {"-12", true, -12, -12.0},
        {"9223372036854775807", true, INT64_MAX, 9223372036854775807.0},
        {"-9223372036854775808", true, INT64_MIN, -9223372036854775808.0},
        {"9223372036854775808", false, 0, 9223372036854775808.0},
        {"18446744073709551616", false, 0, 18446744073709551616.0},
        {"1.5", false, 0, 1.5},
        {"-0.25", false, 0, -0.25},
        {"1e3", false, 0, 1000.0},
        {"1E+3", false, 0, 1000.0},
        {"2.5e-3", false, 0, 0.0025},
        {"1.0", false, 0, 1.0},
        {"0.1", false, 0, 0.1},
        {"1e-400", false, 0, 0.0},
        {"123456789012345678901234567890123456789012345678901234567890123456789012345", false, 0,
         1.2345678901234568e74},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const ck_json *v = parse(a, cases[k].t, CKPT_OK);
        cr_assert_eq(v->type, CK_JSON_NUMBER);
        cr_assert_eq(v->is_int, cases[k].is_int, "%s", cases[k].t);
        if (cases[k].is_int) cr_assert_eq(v->u.num.i, cases[k].i, "%s", cases[k].t);
        cr_assert(v->u.num.d == cases[k].d, "%s: %.17g", cases[k].t, v->u.num.d);
    }
    cr_assert(signbit(parse(a, "-0", CKPT_OK)->u.num.d));
    /* integers near 2^53, where the parser stops converting them itself: as strtod does */
    static const char *near[] = {"9007199254740991",  "9007199254740992",   "9007199254740993",
                                 "9007199254740995",  "-9007199254740993",  "18014398509481987",
                                 "-9007199254740992", "4611686018427387905"};
    for (size_t k = 0; k < sizeof near / sizeof near[0]; k++)
        cr_assert(parse(a, near[k], CKPT_OK)->u.num.d == strtod(near[k], NULL), "%s", near[k]);
    static const char *bad[] = {"01",       "-01",       "+1",    ".5",     "1.",    "1.e3",
                                "1e",       "1e+",       "-",     "--1",    "0x10",  "NaN",
                                "Infinity", "-Infinity", "1e400", "-1e400", "1_000", "١"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        parse(a, bad[k], CKPT_E_FORMAT);
    ck_arena_free(a);
}

Test(json, containers_keep_order_and_duplicates) {
    ck_arena *a = ck_arena_new(0);
    const ck_json *v =
        parse(a, "{\"b\": [1, [], {}, \"x\"], \"a\": {\"k\": null}, \"b\": 2}", CKPT_OK);
    cr_assert_eq(v->type, CK_JSON_OBJECT);
    cr_assert_eq(v->len, 3);
    cr_assert_str_eq(v->u.members[0].key, "b");
    cr_assert_str_eq(v->u.members[1].key, "a");
    cr_assert_str_eq(v->u.members[2].key, "b");
    const ck_json *arr = &v->u.members[0].value;
    cr_assert_eq(arr->type, CK_JSON_ARRAY);
    cr_assert_eq(arr->len, 4);
    cr_assert_eq(ck_json_at(arr, 0)->u.num.i, 1);
    cr_assert(ck_json_at(arr, 1)->type == CK_JSON_ARRAY && ck_json_at(arr, 1)->len == 0);
    cr_assert(ck_json_at(arr, 2)->type == CK_JSON_OBJECT && ck_json_at(arr, 2)->len == 0);
    cr_assert_str_eq(ck_json_at(arr, 3)->u.str, "x");
    cr_assert_null(ck_json_at(arr, 4));
    cr_assert_null(ck_json_at(v, 0));
    /* last duplicate wins, like Python's json */
    cr_assert_eq(ck_json_get(v, "b")->type, CK_JSON_NUMBER);
    cr_assert_eq(ck_json_get(ck_json_get(v, "a"), "k")->type, CK_JSON_NULL);
    cr_assert_null(ck_json_get(v, "c"));
    cr_assert_null(ck_json_get(arr, "b"));
    cr_assert_str_eq(ck_json_type_name(CK_JSON_OBJECT), "object");
    ck_arena_free(a);
}

Test(json, string_escapes) {
    ck_arena *a = ck_arena_new(0);
    const ck_json *v =
        parse(a, "\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u00e9 \\u20AC \\ud83d\\ude00 z\"", CKPT_OK);
    const char want[] = "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 z";
    cr_assert_eq(v->len, sizeof want - 1);
    cr_assert_arr_eq(v->u.str, want, sizeof want);
    v = parse(a, "\"a\\u0000b\"", CKPT_OK);
    cr_assert_eq(v->len, 3);
    cr_assert_arr_eq(v->u.str, "a\0b", 4);
    /* raw UTF-8 passes through */
    v = parse(a, "\"caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf\"", CKPT_OK);
    cr_assert_str_eq(v->u.str, "caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf");
    static const char *bad[] = {
        "\"\\x\"",      "\"\\u12\"",     "\"\\u12G4\"",
        "\"\\ud800\"",  "\"\\udc00\"",   "\"\\ud800\\u0041\"",
        "\"\\ud800x\"", "\"\\ud800\\\"", "\"\\",
        "\"abc",        "\"\\U00e9\"",   "\"a\tb\"",
        "\"a\nb\"",     "\"\x01\"",      "\"\\ud83d\\ude0\"",
        "'single'",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        parse(a, bad[k], CKPT_E_FORMAT);
    ck_arena_free(a);
}

Test(json, invalid_utf8) {
    ck_arena *a = ck_arena_new(0);
    static const char *bad[] = {
        "\"\x80\"",             /* stray continuation */
        "\"\xc0\x80\"",         /* overlong NUL */
        "\"\xc1\xbf\"",         /* overlong */
        "\"\xe0\x80\x80\"",     /* overlong 3-byte */
        "\"\xe0\x9f\xbf\"",     /* overlong 3-byte */
        "\"\xed\xa0\x80\"",     /* UTF-8 encoded surrogate */
        "\"\xf0\x80\x80\x80\"", /* overlong 4-byte */
        "\"\xf4\x90\x80\x80\"", /* > U+10FFFF */
        "\"\xf5\x80\x80\x80\"", /* invalid lead */
        "\"\xff\"",             /* invalid byte */
        "\"\xc3\"",             /* truncated */
        "\"\xe2\x82\"",         /* truncated */
        "\"\xc3\x28\"",         /* bad continuation */
        "\xc3\xa9",             /* non-ASCII outside a string */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const ck_json *v;
        ckpt_error err = {0};
        cr_assert_eq(ck_json_parse(a, bad[k], strlen(bad[k]), 0, &v, &err), CKPT_E_FORMAT,
                     "case %zu", k);
        cr_assert(!strncmp(err.message, "json offset ", 12), "%s", err.message);
    }
    ck_arena_free(a);
}

Test(json, syntax_errors) {
    ck_arena *a = ck_arena_new(0);
    static const char *bad[] = {
        "",
        "   ",
        "[1,]",
        "{\"a\":1,}",
        "[1 2]",
        "{\"a\" 1}",
        "{a:1}",
        "{\"a\":}",
        "{,}",
        "[,]",
        "[",
        "]",
        "{",
        "}",
        "[1",
        "{\"a\":1",
        "tru",
        "nul",
        "True",
        "1 2",
        "{} x",
        "[]]",
        "/* c */ 1",
        "1 // c",
        "\"a\" \"b\"",
        "[1,,2]",
        "{\"a\":1 \"b\":2}",
        "{1:2}",
        "\x00",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const ck_json *v = (const ck_json *)1;
        ckpt_error err = {0};
        size_t len = k == sizeof bad / sizeof bad[0] - 1 ? 1 : strlen(bad[k]);
        cr_assert_eq(ck_json_parse(a, bad[k], len, 0, &v, &err), CKPT_E_FORMAT, "'%s'", bad[k]);
        cr_assert_null(v);
    }
    /* the error names the offset */
    const ck_json *v;
    ckpt_error err = {0};
    cr_assert_eq(ck_json_parse(a, "[1, 2, x]", 9, 0, &v, &err), CKPT_E_FORMAT);
    cr_assert_str_eq(err.message, "json offset 7: unexpected character, expected a value");
    /* the length bounds the text: no read past it */
    cr_assert_eq(ck_json_parse(a, "[1, 2]", 5, 0, &v, &err), CKPT_E_FORMAT);
    cr_assert_eq(ck_json_parse(a, "truex", 4, 0, &v, &err), CKPT_OK);
    ck_arena_free(a);
}

Test(json, depth_limit) {
    ck_arena *a = ck_arena_new(0);
    const ck_json *v;
    ckpt_error err = {0};
    cr_assert_eq(ck_json_parse(a, "[[[]]]", 6, 3, &v, &err), CKPT_OK);
    cr_assert_eq(ck_json_parse(a, "[[[[]]]]", 8, 3, &v, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "deeper than 3"), "%s", err.message);
    cr_assert_eq(ck_json_parse(a, "{\"a\":{\"b\":[{}]}}", 16, 4, &v, &err), CKPT_OK);
    cr_assert_eq(ck_json_parse(a, "{\"a\":{\"b\":[{}]}}", 16, 3, &v, &err), CKPT_E_LIMIT);
    /* huge limits are clamped to CK_JSON_MAX_DEPTH (the parser recurses) */
    char deep[10000];
    memset(deep, '[', sizeof deep);
    cr_assert_eq(ck_json_parse(a, deep, sizeof deep, UINT32_MAX, &v, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "deeper than 4096"), "%s", err.message);
    /* a depth bomb: a million '[' fails fast at the default limit, without deep recursion */
    size_t n = 1000000;
    char *bomb = malloc(n);
    memset(bomb, '[', n);
    cr_assert_eq(ck_json_parse(a, bomb, n, 0, &v, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "json offset 128:"), "%s", err.message);
    memset(bomb, '{', n);
    for (size_t i = 0; i + 4 <= n; i += 4)
        memcpy(bomb + i, "{\"\":", 4);
    cr_assert_eq(ck_json_parse(a, bomb, n, 0, &v, &err), CKPT_E_LIMIT);
    free(bomb);
    ck_arena_free(a);
}

Test(json, arena_budget) {
    ck_arena *a = ck_arena_new(4096);
    const ck_json *v;
    ckpt_error err = {0};
    char big[20000];
    size_t k = 0;
    big[k++] = '[';
    while (k < sizeof big - 3) {
        big[k++] = '0';
        big[k++] = ',';
    }
    big[k++] = '0';
    big[k++] = ']';
    cr_assert_eq(ck_json_parse(a, big, k, 0, &v, &err), CKPT_E_LIMIT);
    cr_assert(strstr(err.message, "budget"), "%s", err.message);
    ck_arena_free(a);
    a = ck_arena_new(0);
    cr_assert_eq(ck_json_parse(a, big, k, 0, &v, &err), CKPT_OK);
    cr_assert_eq(v->len, (k - 1) / 2);
    ck_arena_free(a);
}

Test(json, escape_round_trips) {
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } cases[] = {
        {"plain", 5, "\"plain\""},
        {"", 0, "\"\""},
        {"q\"b\\s/", 6, "\"q\\\"b\\\\s/\""},
        {"\b\f\n\r\t\x01\x1f\x7f", 8, "\"\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\""},
        {"a\0b", 3, "\"a\\u0000b\""},
        {"caf\xc3\xa9 \xf0\x9f\x98\x80", 10, "\"caf\xc3\xa9 \xf0\x9f\x98\x80\""},
        {"bad\xff\xc3(x\xed\xa0\x80", 10, "\"bad\\ufffd\\ufffd(x\\ufffd\\ufffd\\ufffd\""},
        {"trunc\xe2\x82", 7, "\"trunc\\ufffd\\ufffd\""},
    };
    ck_arena *a = ck_arena_new(0);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ck_strbuf sb = CK_STRBUF_INIT;
        cr_assert(ck_json_escape(&sb, cases[k].in, cases[k].len));
        cr_assert_str_eq(ck_strbuf_cstr(&sb), cases[k].out, "case %zu", k);
        const ck_json *v;
        ckpt_error err = {0};
        cr_assert_eq(ck_json_parse(a, sb.buf, sb.len, 0, &v, &err), CKPT_OK, "%s", err.message);
        if (k < 6) {
            cr_assert_eq(v->len, cases[k].len);
            cr_assert_arr_eq(v->u.str, cases[k].in, cases[k].len);
        }
        ck_strbuf_release(&sb);
    }
    /* every byte value, alone, escapes to valid JSON */
    for (int c = 0; c < 256; c++) {
        char s[1] = {(char)c};
        ck_strbuf sb = CK_STRBUF_INIT;
        ck_json_escape(&sb, s, 1);
        const ck_json *v;
        cr_assert_eq(ck_json_parse(a, sb.buf, sb.len, 0, &v, NULL), CKPT_OK, "byte %d", c);
        ck_strbuf_release(&sb);
    }
    ck_arena_free(a);
}

Test(strbuf, append_format_detach) {
    ck_strbuf sb = CK_STRBUF_INIT;
    cr_assert_str_eq(ck_strbuf_cstr(&sb), "");
    cr_assert(ck_strbuf_adds(&sb, "ab"));
    cr_assert(ck_strbuf_addc(&sb, 'c'));
    cr_assert(ck_strbuf_addf(&sb, "-%d-%s", 42, "x"));
    cr_assert_str_eq(ck_strbuf_cstr(&sb), "abc-42-x");
    cr_assert_eq(sb.len, 8);
    for (int i = 0; i < 1000; i++)
        ck_strbuf_addf(&sb, "%04d", i);
    cr_assert_eq(sb.len, 8 + 4000);
    cr_assert(!memcmp(sb.buf + 8 + 4 * 999, "0999", 5));
    size_t len;
    char *s = ck_strbuf_detach(&sb, &len);
    cr_assert_eq(len, 4008);
    cr_assert_eq(strlen(s), 4008);
    free(s);
    cr_assert_null(sb.buf);
    cr_assert_eq(sb.len, 0);
    s = ck_strbuf_detach(&sb, &len);
    cr_assert_str_eq(s, "");
    free(s);
    ck_strbuf_add(&sb, "x\0y", 3);
    cr_assert_eq(sb.len, 3);
    ck_strbuf_reset(&sb);
    cr_assert_eq(sb.len, 0);
    cr_assert_str_eq(sb.buf, "");
    ck_strbuf_release(&sb);
    ck_strbuf_release(&sb);
}

Test(strbuf, cap_is_sticky) {
    ck_strbuf sb;
    ck_strbuf_init(&sb, 10);
    cr_assert(ck_strbuf_adds(&sb, "0123456789"));
    cr_assert(!ck_strbuf_addc(&sb, 'x'));
    cr_assert_eq(sb.status, CKPT_E_LIMIT);
    cr_assert(!ck_strbuf_adds(&sb, ""), "failure is sticky");
    cr_assert_str_eq(sb.buf, "0123456789");
    ckpt_error err = {0};
    cr_assert_eq(ck_strbuf_status(&sb, "render", &err), CKPT_E_LIMIT);
    cr_assert_str_eq(err.message, "render: text longer than the 10 bytes allowed");
    cr_assert_null(ck_strbuf_detach(&sb, NULL));
    cr_assert_null(sb.buf);
    /* formatted appends respect the cap both when they fit the allocation and when not */
    ck_strbuf_init(&sb, 70);
    cr_assert(ck_strbuf_adds(&sb, "abc"));
    cr_assert(!ck_strbuf_addf(&sb, "%070d", 5));
    cr_assert_str_eq(sb.buf, "abc");
    ck_strbuf_reset(&sb);
    cr_assert_eq(sb.status, CKPT_OK);
    cr_assert(ck_strbuf_addf(&sb, "%s", "fits"));
    cr_assert_eq(ck_strbuf_status(&sb, "x", NULL), CKPT_OK);
    ck_strbuf_release(&sb);
    cr_assert_eq(sb.max, 70, "release keeps the cap");
    ck_strbuf_init(&sb, 5);
    cr_assert(ck_strbuf_adds(&sb, "abc"));
    cr_assert(!ck_strbuf_addf(&sb, "%s", "xyz"), "fits the allocation, not the cap");
    cr_assert_str_eq(sb.buf, "abc");
    cr_assert_eq(sb.len, 3);
    ck_strbuf_release(&sb);
}

/* The public quoting the CLI uses: Python's json.loads gives the text back where it was
 * valid UTF-8; invalid bytes become U+FFFD one each; DEL stays raw (valid JSON). */
Test(json, public_string_literal) {
    static const struct {
        const char *in;
        size_t len;
        const char *want;
    } cases[] = {
        {"plain", 5, "\"plain\""},
        {"q\"b\\", 4, "\"q\\\"b\\\\\""},
        {"\n\t\x01\x7f", 4, "\"\\n\\t\\u0001\x7f\""},
        {"caf\xc3\xa9", 5, "\"caf\xc3\xa9\""},
        {"a\xff\xc3", 3, "\"a\\ufffd\\ufffd\""},
        {"\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\""}, /* a surrogate: invalid */
        {"nul\0x", 5, "\"nul\\u0000x\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *q = ckpt_json_string(cases[i].in, cases[i].len);
        cr_assert(q);
        cr_expect_str_eq(q, cases[i].want, "case %zu", i);
        free(q);
    }
}

/* Python's json.dumps writes NaN, Infinity and -Infinity (allow_nan=True): the strict parser
 * refuses them, ck_json_parse_python reads them as numbers and nothing else more. */
Test(json, python_constants) {
    ck_arena *a = ck_arena_new(0);
    const char *text = "[NaN, Infinity, -Infinity, 1.5, -2]";
    const ck_json *v = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ck_json_parse(a, text, strlen(text), 0, &v, &err), CKPT_E_FORMAT);
    cr_assert_eq(ck_json_parse_python(a, text, strlen(text), 0, &v, &err), CKPT_OK, "%s",
                 err.message);
    cr_assert(v->type == CK_JSON_ARRAY && v->len == 5);
    for (size_t i = 0; i < 3; i++)
        cr_assert(v->u.items[i].type == CK_JSON_NUMBER && !v->u.items[i].is_int);
    cr_assert(isnan(v->u.items[0].u.num.d));
    cr_assert(isinf(v->u.items[1].u.num.d) && v->u.items[1].u.num.d > 0);
    cr_assert(isinf(v->u.items[2].u.num.d) && v->u.items[2].u.num.d < 0);
    cr_assert(v->u.items[4].is_int && v->u.items[4].u.num.i == -2);
    static const char *bad[] = {"nan", "NaNa", "-NaN", "Inf", "+Infinity", "-Infinit", "[NaN,]"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        cr_assert_eq(ck_json_parse_python(a, bad[k], strlen(bad[k]), 0, &v, &err), CKPT_E_FORMAT,
                     "'%s'", bad[k]);
    ck_arena_free(a);
}

/* Integers beyond int64 keep their text (Python's int() keeps every digit), up to Python's
 * 4300 digits; a float beyond a double is inf in the Python reading (float()), an error in
 * the strict one. */
Test(json, big_integers_keep_their_digits) {
    ck_arena *a = ck_arena_new(0);
    const char *text = "[18446744073709551616, -9223372036854775809, 9223372036854775807, 1e2]";
    const ck_json *v = NULL;
    ckpt_error err = {0};
    cr_assert_eq(ck_json_parse(a, text, strlen(text), 0, &v, &err), CKPT_OK, "%s", err.message);
    cr_assert(!v->u.items[0].is_int && v->u.items[0].u.num.big);
    cr_assert_str_eq(v->u.items[0].u.num.big, "18446744073709551616");
    cr_assert_eq(v->u.items[0].len, 20);
    cr_assert_str_eq(v->u.items[1].u.num.big, "-9223372036854775809");
    cr_assert(v->u.items[2].is_int && !v->u.items[2].u.num.big);
    cr_assert(!v->u.items[3].is_int && !v->u.items[3].u.num.big);
    char digits[4400];
    memset(digits, '9', sizeof digits);
    cr_assert_eq(ck_json_parse(a, digits, 4300, 0, &v, &err), CKPT_OK, "%s", err.message);
    cr_assert(v->u.num.big && v->len == 4300 && isinf(v->u.num.d));
    cr_assert_eq(ck_json_parse(a, digits, 4301, 0, &v, &err), CKPT_E_FORMAT);
    cr_assert(strstr(err.message, "offset 0") && strstr(err.message, "4300"), "%s", err.message);
    cr_assert_eq(ck_json_parse(a, "1e400", 5, 0, &v, &err), CKPT_E_FORMAT);
    cr_assert_eq(ck_json_parse_python(a, "-1e400", 6, 0, &v, &err), CKPT_OK);
    cr_assert(isinf(v->u.num.d) && v->u.num.d < 0 && !v->u.num.big);
    ck_arena_free(a);
}
