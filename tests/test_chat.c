/* Tests of chat templates: detection of template families and exact renderings. */
#include "common/check.h"
#include "text/chat.h"

#include <stdlib.h>
#include <string.h>

/* Errors are expected here; keep them off stderr. */
static int g_errors_logged;
static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)msg;
    (void)user_data;
    g_errors_logged += level == CLLM_LOG_ERROR;
}

/* clang-format off */
#define SYS(s)  {"system", s}
#define USER(s) {"user", s}
#define ASST(s) {"assistant", s}
/* clang-format on */
#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- detection on realistic templates ---- */

/* SmolLM2-Instruct (ChatML with a default system prompt). */
static const char k_tmpl_smollm2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

/* Qwen2.5-Instruct (ChatML with tools), abridged; Jinja escapes ("\\n") in
 * its string literals. */
static const char k_tmpl_qwen25[] =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == "
    "'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are "
    "Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n    "
    "{{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user "
    "query.\" }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- "
    "'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in "
    "messages %}\n    {{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>' + '\\n' }}\n    {%- if message.tool_calls %}{{- '<tool_call>' }}{%- endif %}"
    "\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

/* Plain ChatML, no default system prompt. */
static const char k_tmpl_chatml[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* Meta-Llama-3-8B-Instruct. */
static const char k_tmpl_llama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/* Llama 3.1/3.2-Instruct, abridged (date header and tools). */
static const char k_tmpl_llama31[] =
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n"
    "{%- endif %}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul "
    "2024\" %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + "
    "\"\\n\\n\" }}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n";

/* Gemma 2 instruct. */
static const char k_tmpl_gemma2[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
    "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
    "'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
    "alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == "
    "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
    "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\n'}}{% endif %}";

/* Gemma 3 instruct, abridged. */
static const char k_tmpl_gemma3[] =
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- set first_user_prefix "
    "= messages[0]['content'] + '\\n\\n' -%}\n    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = "
    "messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if "
    "(message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else "
    "-%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ "
    "'<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n    "
    "{{ message['content'] | trim }}\n    {{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n{%- if "
    "add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n";

/* Llama-2-7b-chat-hf. */
static const char k_tmpl_llama2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == "
    "0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
    "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
    "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

/* zephyr-7b-beta and TinyLlama-1.1B-Chat-v1.0 (eos_token is "</s>"). */
static const char k_tmpl_zephyr[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
    "'<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
    "'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
    "{% endfor %}";

/* A zephyr template with the end of turn written out. */
static const char k_tmpl_zephyr_literal[] =
    "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '</s>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
    "{# roles: <|user|> <|assistant|> <|system|> #}";

/* Mistral-7B-Instruct-v0.1: [INST] without <<SYS>>. */
static const char k_tmpl_mistral[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles are supported!') }}{% endif %}{% endfor %}";

/* Phi-3.5-mini-instruct: <|user|> and <|assistant|>, but turns end with <|end|>. */
static const char k_tmpl_phi3[] =
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == "
    "'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}"
    "{{ eos_token }}{% endif %}";

/* Phi-3-mini-4k-instruct (as in llama.cpp's ggml-vocab-phi-3.gguf): no
 * system turn, the generation prompt after every user turn. */
static const char k_tmpl_phi3_mini[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
    "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}"
    "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}"
    "{% endif %}{% endfor %}";

static void test_detect(void) {
    const struct {
        const char *name;
        const char *src;
        cllm_chat_style want;
    } ok[] = {
        {"smollm2", k_tmpl_smollm2, CLLM_CHAT_STYLE_CHATML},
        {"qwen2.5", k_tmpl_qwen25, CLLM_CHAT_STYLE_CHATML},
        {"chatml", k_tmpl_chatml, CLLM_CHAT_STYLE_CHATML},
        {"llama3", k_tmpl_llama3, CLLM_CHAT_STYLE_LLAMA3},
        {"llama3.1", k_tmpl_llama31, CLLM_CHAT_STYLE_LLAMA3},
        {"gemma2", k_tmpl_gemma2, CLLM_CHAT_STYLE_GEMMA},
        {"gemma3", k_tmpl_gemma3, CLLM_CHAT_STYLE_GEMMA},
        {"llama2", k_tmpl_llama2, CLLM_CHAT_STYLE_LLAMA2},
        {"zephyr", k_tmpl_zephyr, CLLM_CHAT_STYLE_ZEPHYR},
        {"zephyr-literal", k_tmpl_zephyr_literal, CLLM_CHAT_STYLE_ZEPHYR},
        {"phi3.5", k_tmpl_phi3, CLLM_CHAT_STYLE_PHI3},
        {"phi3-mini", k_tmpl_phi3_mini, CLLM_CHAT_STYLE_PHI3},
    };
    for (size_t i = 0; i < N(ok); i++) {
        cllm_chat_style style = CLLM_CHAT_STYLE_COUNT;
        cllm_status st = cllm_chat_style_detect(ok[i].src, &style);
        CHECKF(st == CLLM_OK && style == ok[i].want, "%s: status %d, style %s", ok[i].name, st,
               cllm_chat_style_name(style));
    }

    const struct {
        const char *name;
        const char *src;
        cllm_status want;
        const char *in_message;
    } bad[] = {
        {"NULL", NULL, CLLM_ERR_INVALID_ARG, "no chat template"},
        {"empty", "", CLLM_ERR_INVALID_ARG, "no chat template"},
        {"mistral", k_tmpl_mistral, CLLM_ERR_UNSUPPORTED, "Mistral"},
        {"plain", "{% for message in messages %}{{ message['content'] }}{% endfor %}",
         CLLM_ERR_UNSUPPORTED, "unrecognised chat template \"{% for message in messages %}"},
        {"llama4", "{{- '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' }}",
         CLLM_ERR_UNSUPPORTED, "chatml, llama2, llama3, gemma, zephyr"},
        {"sys only", "<<SYS>> but no inst", CLLM_ERR_UNSUPPORTED, "unrecognised"},
        {"user only", "<|user|>\n{{ content }}</s>", CLLM_ERR_UNSUPPORTED, "unrecognised"},
    };
    for (size_t i = 0; i < N(bad); i++) {
        cllm_chat_style style = CLLM_CHAT_STYLE_COUNT;
        cllm_status st = cllm_chat_style_detect(bad[i].src, &style);
        CHECKF(st == bad[i].want, "%s: status %d", bad[i].name, st);
        CHECKF(style == CLLM_CHAT_STYLE_COUNT, "%s: output touched", bad[i].name);
        CHECKF(strstr(cllm_last_error(), bad[i].in_message) != NULL, "%s: message '%s'",
               bad[i].name, cllm_last_error());
    }
    /* The quoted start of the template stays on one line. */
    cllm_chat_style style;
    CHECK(cllm_chat_style_detect("line one\nline two", &style) == CLLM_ERR_UNSUPPORTED);
    CHECK(strchr(cllm_last_error(), '\n') == NULL);
}

static void test_default_system(void) {
    const struct {
        const char *name;
        const char *src;
        const char *want; /* NULL: none */
    } cases[] = {
        {"smollm2", k_tmpl_smollm2,
         "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
        {"smollm2 escaped",
         "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou "
         "are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
         "{% endif %}",
         "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
        {"qwen2.5", k_tmpl_qwen25,
         "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
        {"escapes", "{{ \"<|im_start|>system\\nIt's \\\"fine\\\"\\tok\\\\ \\x<|im_end|>\\n\" }}",
         "It's \"fine\"\tok\\ \\x"},
        {"double-quoted", "{{ \"<|im_start|>system\nBe 'nice'.<|im_end|>\n\" }}", "Be 'nice'."},
        {"chatml", k_tmpl_chatml, NULL},
        {"llama3", k_tmpl_llama3, NULL},
        {"gemma3", k_tmpl_gemma3, NULL},
        {"zephyr", k_tmpl_zephyr, NULL},
        {"no end", "{{ '<|im_start|>system\\nhello' }}", NULL},
        {"empty text", "{{ '<|im_start|>system\\n<|im_end|>\\n' }}", NULL},
        {"no quote", "<|im_start|>system\nhi<|im_end|>", NULL},
        {"empty", "", NULL},
        {"NULL", NULL, NULL},
    };
    /* Hostile templates: many openings before one far closing, and a
     * default prompt over the 4 KiB cap. Both finish fast and find nothing. */
    const char *unit = "'<|im_start|>system\n";
    const size_t n_units = 50000, unit_len = strlen(unit);
    char *big = malloc(n_units * unit_len + 64);
    CLLM_ASSERT(big != NULL);
    for (size_t i = 0; i < n_units; i++) memcpy(big + i * unit_len, unit, unit_len);
    strcpy(big + n_units * unit_len, "<|im_end|>'");
    char *got = (char *)"untouched";
    CHECK(cllm_chat_default_system(big, &got) == CLLM_OK && got == NULL);
    strcpy(big, "'<|im_start|>system\n");
    memset(big + strlen(big), 'a', 5000);
    strcpy(big + 5000 + strlen(unit), "<|im_end|>'");
    got = (char *)"untouched";
    CHECK(cllm_chat_default_system(big, &got) == CLLM_OK && got == NULL);
    free(big);

    for (size_t i = 0; i < N(cases); i++) {
        got = (char *)"untouched";
        cllm_status st = cllm_chat_default_system(cases[i].src, &got);
        CHECKF(st == CLLM_OK, "%s: status %d", cases[i].name, st);
        if (cases[i].want) {
            CHECKF(got && strcmp(got, cases[i].want) == 0, "%s: got [%s]", cases[i].name,
                   got ? got : "(null)");
            free(got);
        } else {
            CHECKF(got == NULL, "%s: got [%s]", cases[i].name, got);
        }
    }
}

/* ---- names and properties ---- */

static void test_names(void) {
    for (int s = 0; s < CLLM_CHAT_STYLE_COUNT; s++) {
        cllm_chat_style back = CLLM_CHAT_STYLE_COUNT;
        CHECK(cllm_chat_style_from_name(cllm_chat_style_name((cllm_chat_style)s), &back) ==
              CLLM_OK);
        CHECK_EQ_INT(back, s);
    }
    const struct {
        const char *name;
        cllm_chat_style want;
    } aliases[] = {{"ChatML", CLLM_CHAT_STYLE_CHATML},  {"LLAMA-2", CLLM_CHAT_STYLE_LLAMA2},
                   {"llama-3", CLLM_CHAT_STYLE_LLAMA3}, {"Gemma3", CLLM_CHAT_STYLE_GEMMA},
                   {"gemma2", CLLM_CHAT_STYLE_GEMMA},   {"ZEPHYR", CLLM_CHAT_STYLE_ZEPHYR},
                   {"Phi-3", CLLM_CHAT_STYLE_PHI3}};
    for (size_t i = 0; i < N(aliases); i++) {
        cllm_chat_style s = CLLM_CHAT_STYLE_COUNT;
        CHECKF(cllm_chat_style_from_name(aliases[i].name, &s) == CLLM_OK && s == aliases[i].want,
               "%s", aliases[i].name);
    }
    const char *unknown[] = {"", "chat", "chatmlx", "llama", "mistral", NULL};
    for (size_t i = 0; i < N(unknown); i++) {
        cllm_chat_style s = CLLM_CHAT_STYLE_COUNT;
        CHECK(cllm_chat_style_from_name(unknown[i], &s) == CLLM_ERR_UNSUPPORTED);
        CHECK(s == CLLM_CHAT_STYLE_COUNT);
        CHECK(strstr(cllm_last_error(), "chatml, llama2") != NULL);
    }
    CHECK(strcmp(cllm_chat_style_name(CLLM_CHAT_STYLE_COUNT), "unknown") == 0);
    CHECK(strcmp(cllm_chat_style_name((cllm_chat_style)-1), "unknown") == 0);

    CHECK(!cllm_chat_style_has_bos_text(CLLM_CHAT_STYLE_CHATML));
    CHECK(cllm_chat_style_has_bos_text(CLLM_CHAT_STYLE_LLAMA2));
    CHECK(cllm_chat_style_has_bos_text(CLLM_CHAT_STYLE_LLAMA3));
    CHECK(cllm_chat_style_has_bos_text(CLLM_CHAT_STYLE_GEMMA));
    CHECK(!cllm_chat_style_has_bos_text(CLLM_CHAT_STYLE_ZEPHYR));
    CHECK(!cllm_chat_style_has_bos_text(CLLM_CHAT_STYLE_COUNT));

    CHECK(strcmp(cllm_chat_style_eot(CLLM_CHAT_STYLE_CHATML), "<|im_end|>") == 0);
    CHECK(strcmp(cllm_chat_style_eot(CLLM_CHAT_STYLE_LLAMA2), "</s>") == 0);
    CHECK(strcmp(cllm_chat_style_eot(CLLM_CHAT_STYLE_LLAMA3), "<|eot_id|>") == 0);
    CHECK(strcmp(cllm_chat_style_eot(CLLM_CHAT_STYLE_GEMMA), "<end_of_turn>") == 0);
    CHECK(strcmp(cllm_chat_style_eot(CLLM_CHAT_STYLE_ZEPHYR), "</s>") == 0);
    CHECK(strcmp(cllm_chat_style_eot(CLLM_CHAT_STYLE_PHI3), "<|end|>") == 0);
    CHECK(!cllm_chat_style_has_bos_text(CLLM_CHAT_STYLE_PHI3));
    CHECK(strcmp(cllm_chat_style_eot(CLLM_CHAT_STYLE_COUNT), "") == 0);
}

/* ---- exact renderings ---- */

/* Renders through both entry points and compares with `want`. */
static void check_render(const char *what, cllm_chat_style style, const cllm_chat_msg *msgs,
                         size_t n, bool gen, const char *want) {
    char buf[1024];
    size_t needed = 0;
    cllm_status st = cllm_chat_render(style, msgs, n, gen, buf, sizeof(buf), &needed);
    CHECKF(st == CLLM_OK, "%s/%s: %s", cllm_chat_style_name(style), what, cllm_last_error());
    if (st != CLLM_OK) return;
    CHECKF(strcmp(buf, want) == 0, "%s/%s:\n got: [%s]\nwant: [%s]", cllm_chat_style_name(style),
           what, buf, want);
    CHECK_EQ_INT(needed, strlen(want) + 1);

    char *text = NULL;
    size_t len = 0;
    st = cllm_chat_render_alloc(style, msgs, n, gen, &text, &len);
    CHECK(st == CLLM_OK);
    if (st != CLLM_OK) return;
    CHECK(strcmp(text, want) == 0);
    CHECK_EQ_INT(len, strlen(want));
    /* The BOS flag tells the truth about the text. */
    const bool starts_bos = strncmp(text, "<s>", 3) == 0 ||
                            strncmp(text, "<|begin_of_text|>", 17) == 0 ||
                            strncmp(text, "<bos>", 5) == 0;
    CHECK(starts_bos == cllm_chat_style_has_bos_text(style));
    free(text);
}

static const cllm_chat_msg k_conv1[] = {SYS("You are a pirate."), USER("Hello!")};
static const cllm_chat_msg k_conv2[] = {SYS("Be brief."), USER("What is 2+2?"), ASST("4."),
                                        USER("And 3+3?")};
static const cllm_chat_msg k_conv3[] = {USER("Hi"), ASST("Hello, how can I help?")};
/* Whitespace that the trimming templates remove and the others keep. */
static const cllm_chat_msg k_conv4[] = {SYS(" Sys \n"), USER("  padded\t\n"), ASST("\n ok \n")};

static void test_render_chatml(void) {
    const cllm_chat_style s = CLLM_CHAT_STYLE_CHATML;
    check_render("sys+user", s, k_conv1, N(k_conv1), true,
                 "<|im_start|>system\nYou are a pirate.<|im_end|>\n"
                 "<|im_start|>user\nHello!<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render("multi-turn", s, k_conv2, N(k_conv2), true,
                 "<|im_start|>system\nBe brief.<|im_end|>\n"
                 "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                 "<|im_start|>assistant\n4.<|im_end|>\n"
                 "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render("no prompt", s, k_conv3, N(k_conv3), false,
                 "<|im_start|>user\nHi<|im_end|>\n"
                 "<|im_start|>assistant\nHello, how can I help?<|im_end|>\n");
    check_render("whitespace", s, k_conv4, N(k_conv4), false,
                 "<|im_start|>system\n Sys \n<|im_end|>\n"
                 "<|im_start|>user\n  padded\t\n<|im_end|>\n"
                 "<|im_start|>assistant\n\n ok \n<|im_end|>\n");
    /* System messages may appear anywhere. */
    const cllm_chat_msg mid[] = {USER("a"), SYS("b"), USER("c")};
    check_render("system mid", s, mid, N(mid), true,
                 "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n"
                 "<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n");
}

static void test_render_llama2(void) {
    const cllm_chat_style s = CLLM_CHAT_STYLE_LLAMA2;
    /* add_assistant_prompt changes nothing: " [/INST]" is the cue. */
    for (int gen = 0; gen < 2; gen++) {
        check_render("sys+user", s, k_conv1, N(k_conv1), gen,
                     "<s>[INST] <<SYS>>\nYou are a pirate.\n<</SYS>>\n\nHello! [/INST]");
    }
    check_render("multi-turn", s, k_conv2, N(k_conv2), true,
                 "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+2? [/INST] 4. </s>"
                 "<s>[INST] And 3+3? [/INST]");
    check_render("no system", s, k_conv3, N(k_conv3), false,
                 "<s>[INST] Hi [/INST] Hello, how can I help? </s>");
    /* strip() of "<<SYS>>\n{S}\n<</SYS>>\n\n{U}": the system text is kept as is,
     * the user text loses only its trailing whitespace. */
    check_render("whitespace", s, k_conv4, N(k_conv4), false,
                 "<s>[INST] <<SYS>>\n Sys \n\n<</SYS>>\n\n  padded [/INST] ok </s>");
    const cllm_chat_msg empty_user[] = {SYS("S"), USER(" \n")};
    check_render("empty user", s, empty_user, N(empty_user), true,
                 "<s>[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
    const cllm_chat_msg user_ws[] = {USER("  hi  "), ASST(" yo ")};
    check_render("user ws", s, user_ws, N(user_ws), false, "<s>[INST] hi [/INST] yo </s>");
}

static void test_render_llama3(void) {
    const cllm_chat_style s = CLLM_CHAT_STYLE_LLAMA3;
    check_render("sys+user", s, k_conv1, N(k_conv1), true,
                 "<|begin_of_text|>"
                 "<|start_header_id|>system<|end_header_id|>\n\nYou are a pirate.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render("multi-turn", s, k_conv2, N(k_conv2), true,
                 "<|begin_of_text|>"
                 "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render("no prompt", s, k_conv3, N(k_conv3), false,
                 "<|begin_of_text|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello, how can I help?"
                 "<|eot_id|>");
    check_render("whitespace", s, k_conv4, N(k_conv4), false,
                 "<|begin_of_text|>"
                 "<|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\npadded<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nok<|eot_id|>");
}

static void test_render_gemma(void) {
    const cllm_chat_style s = CLLM_CHAT_STYLE_GEMMA;
    check_render("sys+user", s, k_conv1, N(k_conv1), true,
                 "<bos><start_of_turn>user\nYou are a pirate.\n\nHello!<end_of_turn>\n"
                 "<start_of_turn>model\n");
    check_render("multi-turn", s, k_conv2, N(k_conv2), true,
                 "<bos><start_of_turn>user\nBe brief.\n\nWhat is 2+2?<end_of_turn>\n"
                 "<start_of_turn>model\n4.<end_of_turn>\n"
                 "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
                 "<start_of_turn>model\n");
    check_render("no prompt", s, k_conv3, N(k_conv3), false,
                 "<bos><start_of_turn>user\nHi<end_of_turn>\n"
                 "<start_of_turn>model\nHello, how can I help?<end_of_turn>\n");
    /* The system prefix is not trimmed; the contents are. */
    check_render("whitespace", s, k_conv4, N(k_conv4), false,
                 "<bos><start_of_turn>user\n Sys \n\n\npadded<end_of_turn>\n"
                 "<start_of_turn>model\nok<end_of_turn>\n");
}

static void test_render_zephyr(void) {
    const cllm_chat_style s = CLLM_CHAT_STYLE_ZEPHYR;
    check_render("sys+user", s, k_conv1, N(k_conv1), true,
                 "<|system|>\nYou are a pirate.</s>\n<|user|>\nHello!</s>\n<|assistant|>\n");
    check_render("multi-turn", s, k_conv2, N(k_conv2), true,
                 "<|system|>\nBe brief.</s>\n<|user|>\nWhat is 2+2?</s>\n"
                 "<|assistant|>\n4.</s>\n<|user|>\nAnd 3+3?</s>\n<|assistant|>\n");
    check_render("no prompt", s, k_conv3, N(k_conv3), false,
                 "<|user|>\nHi</s>\n<|assistant|>\nHello, how can I help?</s>\n");
    check_render(
        "whitespace", s, k_conv4, N(k_conv4), false,
        "<|system|>\n Sys \n</s>\n<|user|>\n  padded\t\n</s>\n<|assistant|>\n\n ok \n</s>\n");
}

/* Expected texts: Phi-3.5-mini-instruct's template (k_tmpl_phi3) rendered
 * by jinja2, without the EOS text it appends when there is no generation
 * prompt (chat.h). Phi-3-mini's (k_tmpl_phi3_mini) renders the same without
 * the system turn. */
static void test_render_phi3(void) {
    const cllm_chat_style s = CLLM_CHAT_STYLE_PHI3;
    check_render("sys+user", s, k_conv1, N(k_conv1), true,
                 "<|system|>\nYou are a pirate.<|end|>\n<|user|>\nHello!<|end|>\n<|assistant|>\n");
    check_render("multi-turn", s, k_conv2, N(k_conv2), true,
                 "<|system|>\nBe brief.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n"
                 "<|assistant|>\n4.<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n");
    check_render("no prompt", s, k_conv3, N(k_conv3), false,
                 "<|user|>\nHi<|end|>\n<|assistant|>\nHello, how can I help?<|end|>\n");
    check_render("whitespace", s, k_conv4, N(k_conv4), false,
                 "<|system|>\n Sys \n<|end|>\n<|user|>\n  padded\t\n<|end|>\n<|assistant|>\n\n "
                 "ok \n<|end|>\n");
    const cllm_chat_msg empty_sys[] = {SYS(""), USER("Hi")};
    check_render("empty system", s, empty_sys, N(empty_sys), true,
                 "<|user|>\nHi<|end|>\n<|assistant|>\n");
}

/* ---- buffer sizes and invalid input ---- */

static void test_buffer(void) {
    const char *want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    const size_t need = strlen(want) + 1;
    const cllm_chat_msg msgs[] = {USER("Hi")};
    char buf[128];
    size_t needed = 0;

    /* Size query with no buffer: OK, and no error is logged. */
    g_errors_logged = 0;
    CHECK(cllm_chat_render(CLLM_CHAT_STYLE_CHATML, msgs, 1, true, NULL, 0, &needed) == CLLM_OK);
    CHECK_EQ_INT(needed, need);
    CHECK_EQ_INT(g_errors_logged, 0);

    /* One byte short: nothing written, *needed set. */
    memset(buf, 'X', sizeof(buf));
    needed = 0;
    CHECK(cllm_chat_render(CLLM_CHAT_STYLE_CHATML, msgs, 1, true, buf, need - 1, &needed) ==
          CLLM_ERR_TOO_LARGE);
    CHECK_EQ_INT(needed, need);
    char msg[128];
    snprintf(msg, sizeof(msg), "needs %zu bytes, the buffer has %zu", need, need - 1);
    CHECKF(strstr(cllm_last_error(), msg) != NULL, "message '%s'", cllm_last_error());
    CHECK_EQ_INT(g_errors_logged, 1);
    bool untouched = true;
    for (size_t i = 0; i < sizeof(buf); i++) untouched &= buf[i] == 'X';
    CHECK(untouched);

    /* Exactly enough. */
    needed = 0;
    CHECK(cllm_chat_render(CLLM_CHAT_STYLE_CHATML, msgs, 1, true, buf, need, &needed) == CLLM_OK);
    CHECK_EQ_INT(needed, need);
    CHECK(strcmp(buf, want) == 0);
    CHECK(buf[need] == 'X'); /* nothing past the NUL */
}

static void test_invalid(void) {
    char buf[256];
    size_t needed = 12345;
    const cllm_chat_msg ok[] = {USER("Hi")};
    const cllm_chat_msg null_content[] = {USER("Hi"), ASST(NULL)};
    const cllm_chat_msg bad_role[] = {{"tool", "x"}};
    const cllm_chat_msg null_role[] = {USER("a"), {NULL, "x"}};
    const cllm_chat_msg upper_role[] = {{"User", "x"}};
    const cllm_chat_msg two_users[] = {USER("a"), USER("b")};
    const cllm_chat_msg asst_first[] = {SYS("s"), ASST("a")};
    const cllm_chat_msg sys_only[] = {SYS("s")};
    const cllm_chat_msg sys_mid[] = {USER("a"), ASST("b"), SYS("c"), USER("d")};
    const struct {
        const char *what;
        cllm_chat_style style;
        const cllm_chat_msg *msgs;
        size_t n;
        const char *in_message;
    } cases[] = {
        {"no messages", CLLM_CHAT_STYLE_CHATML, ok, 0, "no messages"},
        {"NULL messages", CLLM_CHAT_STYLE_CHATML, NULL, 1, "no messages"},
        {"NULL content", CLLM_CHAT_STYLE_LLAMA3, null_content, 2, "message 1 has no content"},
        {"bad role", CLLM_CHAT_STYLE_ZEPHYR, bad_role, 1, "role 'tool'"},
        {"bad role chatml", CLLM_CHAT_STYLE_CHATML, bad_role, 1, "expected system, user"},
        {"NULL role", CLLM_CHAT_STYLE_LLAMA3, null_role, 2, "message 1 has role '(null)'"},
        {"role case", CLLM_CHAT_STYLE_GEMMA, upper_role, 1, "role 'User'"},
        {"bad style", (cllm_chat_style)CLLM_CHAT_STYLE_COUNT, ok, 1, "style"},
        {"llama2 two users", CLLM_CHAT_STYLE_LLAMA2, two_users, 2, "message 1 is user"},
        {"gemma two users", CLLM_CHAT_STYLE_GEMMA, two_users, 2, "alternating"},
        {"llama2 assistant first", CLLM_CHAT_STYLE_LLAMA2, asst_first, 2, "expected user"},
        {"gemma system only", CLLM_CHAT_STYLE_GEMMA, sys_only, 1, "needs a user message"},
        {"llama2 system only", CLLM_CHAT_STYLE_LLAMA2, sys_only, 1, "needs a user message"},
        {"gemma system mid", CLLM_CHAT_STYLE_GEMMA, sys_mid, 4, "message 2 is system"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        memset(buf, 'X', sizeof(buf));
        cllm_status st = cllm_chat_render(cases[i].style, cases[i].msgs, cases[i].n, true, buf,
                                          sizeof(buf), &needed);
        CHECKF(st == CLLM_ERR_INVALID_ARG, "%s: status %d", cases[i].what, st);
        CHECKF(needed == 12345 && buf[0] == 'X', "%s: outputs touched", cases[i].what);
        CHECKF(strstr(cllm_last_error(), cases[i].in_message) != NULL, "%s: message '%s'",
               cases[i].what, cllm_last_error());
        char *text = NULL;
        st = cllm_chat_render_alloc(cases[i].style, cases[i].msgs, cases[i].n, true, &text, NULL);
        CHECKF(st == CLLM_ERR_INVALID_ARG && text == NULL, "%s (alloc)", cases[i].what);
    }
    /* The free-form styles accept the orders the strict ones refuse. */
    const cllm_chat_style free_form[] = {CLLM_CHAT_STYLE_CHATML, CLLM_CHAT_STYLE_LLAMA3,
                                         CLLM_CHAT_STYLE_ZEPHYR};
    for (size_t i = 0; i < N(free_form); i++) {
        CHECK(cllm_chat_render(free_form[i], two_users, 2, true, buf, sizeof(buf), &needed) ==
              CLLM_OK);
        CHECK(cllm_chat_render(free_form[i], sys_only, 1, true, buf, sizeof(buf), &needed) ==
              CLLM_OK);
    }
}

int main(void) {
    cllm_log_set(quiet_log, NULL);
    test_detect();
    test_default_system();
    test_names();
    test_render_chatml();
    test_render_llama2();
    test_render_llama3();
    test_render_gemma();
    test_render_zephyr();
    test_render_phi3();
    test_buffer();
    test_invalid();
    return check_summary("test_chat");
}
