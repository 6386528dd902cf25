/* cmd_info.c — `ckpt info`: a summary of a checkpoint from ckpt_reader_get_info (format
 * variant, metadata class and version, files, ranks, entry/chunk counts, sizes, dtypes), as
 * aligned text or as one JSON object. */
#include "cli.h"

#include <string.h>

void cmd_info_help(FILE *out) {
    fputs("Usage: ckpt info [options] CHECKPOINT_DIR\n"
          "\n"
          "Summarise a checkpoint: format variant, metadata class and version, metadata size,\n"
          "ranks, data files, entries (tensors and objects), chunks, tensor and stored bytes,\n"
          "and the number of tensors per dtype.\n"
          "\n"
          "Options:\n"
          "      --json   print one JSON object (sizes in bytes)\n"
          "      --files  also list the data files\n"
          "      --help   show this help\n",
          out);
}

enum { OPT_JSON = 1, OPT_FILES };

static const cli_opt info_opts[] = {
    {"json", 0, false, OPT_JSON},
    {"files", 0, false, OPT_FILES},
};

static void size_line(const char *label, uint64_t n) {
    char h[48];
    if (n < 1024)
        printf("%-16s %llu bytes\n", label, (unsigned long long)n);
    else
        printf("%-16s %s (%llu bytes)\n", label, cli_human_size(n, h, sizeof h),
               (unsigned long long)n);
}

static void print_text(const ckpt_reader *r, const ckpt_reader_info *in, bool files) {
    printf("%-16s %s\n", "checkpoint:", ckpt_reader_dir(r));
    printf("%-16s %s\n", "format:", in->format_hint ? in->format_hint : "unknown");
    printf("%-16s %s\n", "root class:", in->root_class ? in->root_class : "-");
    printf("%-16s %s\n", "version:", in->version ? in->version : "-");
    if (in->hf_storage) {
        size_line("headers size:", in->metadata_bytes); /* no pickle: safetensors headers */
    } else {
        printf("%-16s %u %s%s\n", "metadata files:", in->num_metadata_files,
               in->rank_local_metadata ? "rank-local file" : "file",
               in->num_metadata_files == 1 ? "" : "s");
        size_line("metadata size:", in->metadata_bytes);
    }
    printf("%-16s planner_data %s, storage_meta %s, megatron %s\n",
           "features:", in->has_planner_data ? "yes" : "no", in->has_storage_meta ? "yes" : "no",
           in->has_mcore_data ? "yes" : "no");
    printf("%-16s %u\n", "ranks:", in->num_ranks);
    printf("%-16s %u\n", "data files:", in->num_files);
    printf("%-16s %llu (%llu tensors, %llu objects)\n",
           "entries:", (unsigned long long)in->num_entries, (unsigned long long)in->num_tensors,
           (unsigned long long)in->num_objects);
    printf("%-16s %llu stored, %llu empty\n", "chunks:", (unsigned long long)in->num_chunks,
           (unsigned long long)in->num_empty_chunks);
    if (in->num_mcore_flattened) /* Megatron's flattened_range states */
        printf("%-16s %llu tensors stored flattened, read in their original shape\n",
               "megatron flat:", (unsigned long long)in->num_mcore_flattened);
    size_line("tensor bytes:", in->tensor_bytes);
    size_line("stored bytes:", in->stored_bytes);
    printf("%-16s", "dtypes:");
    bool any = false;
    for (int d = 1; d < CKPT_DTYPE_COUNT_; d++) {
        if (!in->dtype_counts[d]) continue;
        printf("%s %s %llu", any ? "," : "", ckpt_dtype_name((ckpt_dtype)d),
               (unsigned long long)in->dtype_counts[d]);
        any = true;
    }
    puts(any ? "" : " -");
    if (files)
        for (size_t f = 0; f < ckpt_reader_num_files(r); f++)
            printf("%-16s %s\n", f ? "" : "files:", ckpt_reader_file_name(r, (uint32_t)f));
}

static void json_str_or_null(const char *s) {
    if (s)
        cli_json_string(stdout, s);
    else
        fputs("null", stdout);
}

static void print_json(const ckpt_reader *r, const ckpt_reader_info *in, bool files) {
    fputs("{\"dir\": ", stdout);
    cli_json_string(stdout, ckpt_reader_dir(r));
    fputs(", \"format\": ", stdout);
    json_str_or_null(in->format_hint);
    fputs(", \"root_class\": ", stdout);
    json_str_or_null(in->root_class);
    fputs(", \"version\": ", stdout);
    json_str_or_null(in->version);
    printf(", \"has_planner_data\": %s, \"has_storage_meta\": %s, \"rank_local_metadata\": %s"
           ", \"has_mcore_data\": %s, \"hf_storage\": %s",
           in->has_planner_data ? "true" : "false", in->has_storage_meta ? "true" : "false",
           in->rank_local_metadata ? "true" : "false", in->has_mcore_data ? "true" : "false",
           in->hf_storage ? "true" : "false");
    printf(", \"metadata_files\": %u, \"metadata_bytes\": %llu, \"ranks\": %u, \"files\": %u",
           in->num_metadata_files, (unsigned long long)in->metadata_bytes, in->num_ranks,
           in->num_files);
    printf(", \"entries\": %llu, \"tensors\": %llu, \"objects\": %llu, \"chunks\": %llu"
           ", \"empty_chunks\": %llu, \"megatron_flattened\": %llu, \"tensor_bytes\": %llu"
           ", \"stored_bytes\": %llu",
           (unsigned long long)in->num_entries, (unsigned long long)in->num_tensors,
           (unsigned long long)in->num_objects, (unsigned long long)in->num_chunks,
           (unsigned long long)in->num_empty_chunks, (unsigned long long)in->num_mcore_flattened,
           (unsigned long long)in->tensor_bytes, (unsigned long long)in->stored_bytes);
    fputs(", \"dtypes\": {", stdout);
    bool any = false;
    for (int d = 1; d < CKPT_DTYPE_COUNT_; d++) {
        if (!in->dtype_counts[d]) continue;
        printf("%s\"%s\": %llu", any ? ", " : "", ckpt_dtype_name((ckpt_dtype)d),
               (unsigned long long)in->dtype_counts[d]);
        any = true;
    }
    fputc('}', stdout);
    if (files) {
        fputs(", \"file_names\": [", stdout);
        for (size_t f = 0; f < ckpt_reader_num_files(r); f++) {
            if (f) fputs(", ", stdout);
            cli_json_string(stdout, ckpt_reader_file_name(r, (uint32_t)f));
        }
        fputc(']', stdout);
    }
    fputs("}\n", stdout);
}

int cmd_info(int argc, char **argv) {
    cli_parser p;
    cli_parser_init(&p, "info", argc, argv);
    bool json = false, files = false;
    const char *dir = NULL, *arg;
    for (int id; (id = cli_next(&p, info_opts, sizeof info_opts / sizeof info_opts[0], &arg));) {
        switch (id) {
        case CLI_OPT_HELP: cmd_info_help(stdout); return cli_flush_stdout() ? 0 : CLI_EXIT_FAIL;
        case CLI_OPT_ERROR: return CLI_EXIT_USAGE;
        case CLI_OPT_OPERAND:
            if (dir) return cli_usage_error("info", "too many arguments ('%s')", arg);
            dir = arg;
            break;
        case OPT_JSON: json = true; break;
        case OPT_FILES: files = true; break;
        }
    }
    if (!dir) return cli_usage_error("info", "missing CHECKPOINT_DIR");
    cli_dir dd;
    if (!(dir = cli_step_dir(dir, &dd))) return CLI_EXIT_FAIL;
    ckpt_reader *r = cli_open(dir);
    if (!r) return CLI_EXIT_FAIL;
    ckpt_reader_info in;
    memset(&in, 0, sizeof in);
    ckpt_reader_get_info(r, &in);
    if (json)
        print_json(r, &in, files);
    else
        print_text(r, &in, files);
    int status = cli_flush_stdout() ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    ckpt_reader_free(r);
    return status;
}
