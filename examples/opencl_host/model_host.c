/* Run a whole planned model exported by `laytune export FROZEN --model MODEL`
 * with the OpenCL C API, and check its outputs against laytune's reference.
 *
 * Build it with the header that the export wrote for the model:
 *
 *     cc -std=c99 -O2 -include build/resnet18_81d5c061.h \
 *         examples/opencl_host/model_host.c -lOpenCL -lm -o model_host
 *     ./model_host build/            # one run, outputs checked against the reference
 *     ./model_host build/ 20         # and 20 timed runs after it: the median in ms
 *     ./model_host build/ serve      # then one run per line read on stdin, "ran" after each
 *
 * The header describes the plan: every device buffer (a tensor copy in its
 * planned layout, global buffer or RGBA float image, with the file of its
 * packed data for a constant), every program (source file, build options),
 * every launch in run order (kernel, arguments as buffer indices, global
 * and local sizes), which buffers take the model's inputs and give its
 * outputs (both in logical row-major order), and the reference files when
 * the export wrote them. This program allocates every buffer once (one whose
 * storage names an earlier buffer uses that one's memory, as laytune does),
 * fills it with NaN (so that a read of padding nobody wrote shows),
 * uploads the constants, builds the programs and the kernels once, then per
 * run uploads the inputs, enqueues every launch and reads the outputs back.
 * Exit status 0: every output matches; 1: an output differs; 2: OpenCL or
 * file trouble.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "laytune_host.h"

#ifndef LAYTUNE_MODEL_BUFFERS
#error "include the header laytune export --model wrote: cc -include build/<name>.h model_host.c"
#endif

#include <time.h>

static double seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void upload_inputs(cl_command_queue queue, cl_mem *memory, void **data) {
    for (int i = 0; i < LAYTUNE_MODEL_INPUT_COUNT; i++) {
        const laytune_model_input *input = &LAYTUNE_MODEL_INPUTS[i];
        size_t bytes = LAYTUNE_MODEL_BUFFERS[input->buffer].item_size * input->elements;
        check(clEnqueueWriteBuffer(queue, memory[input->buffer], CL_FALSE, 0, bytes, data[i], 0,
                                   NULL, NULL),
              "clEnqueueWriteBuffer (input)");
    }
}

static void enqueue_launches(cl_command_queue queue, cl_kernel *kernels) {
    for (int k = 0; k < LAYTUNE_MODEL_LAUNCH_COUNT; k++) {
        const laytune_model_launch *launch = &LAYTUNE_MODEL_LAUNCHES[k];
        const size_t *local = launch->local_size[0] ? launch->local_size : NULL;
        check(clEnqueueNDRangeKernel(queue, kernels[k], launch->dims, NULL, launch->global_size,
                                     local, 0, NULL, NULL),
              launch->label);
    }
}

/* One inference: the inputs up, every launch, the outputs back into ``out``. */
static void infer(cl_command_queue queue, cl_mem *memory, cl_kernel *kernels, void **inputs,
                  float **out) {
    upload_inputs(queue, memory, inputs);
    enqueue_launches(queue, kernels);
    for (int o = 0; o < LAYTUNE_MODEL_OUTPUT_COUNT; o++)
        check(clEnqueueReadBuffer(queue, memory[LAYTUNE_MODEL_OUTPUTS[o].buffer], CL_FALSE, 0,
                                  LAYTUNE_MODEL_OUTPUTS[o].elements * sizeof(float), out[o], 0,
                                  NULL, NULL),
              "clEnqueueReadBuffer");
    check(clFinish(queue), "clFinish");
}

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : ".";
    int serve = argc > 2 && strcmp(argv[2], "serve") == 0;
    int repeats = argc > 2 && !serve ? atoi(argv[2]) : 0;
    cl_int status;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue = open_queue(LAYTUNE_DEVICE_NAME, &device, &context);

    cl_program programs[LAYTUNE_MODEL_PROGRAM_COUNT];
    for (int p = 0; p < LAYTUNE_MODEL_PROGRAM_COUNT; p++)
        programs[p] = build_program(context, device, folder, LAYTUNE_MODEL_PROGRAMS[p].source_file,
                                    LAYTUNE_MODEL_PROGRAMS[p].build_options);

    cl_mem memory[LAYTUNE_MODEL_BUFFER_COUNT];
    const float nan4[4] = {NAN, NAN, NAN, NAN};
    for (int b = 0; b < LAYTUNE_MODEL_BUFFER_COUNT; b++) {
        const laytune_model_buffer *buffer = &LAYTUNE_MODEL_BUFFERS[b];
        size_t bytes = buffer->elements * buffer->item_size;
        int is_float = strcmp(buffer->dtype, "float32") == 0;
        if (buffer->memory == LAYTUNE_IMAGE2D) {
            memory[b] = create_image(context, buffer->image_width, buffer->image_height, &status);
            check(status, "clCreateImage");
            size_t origin[3] = {0, 0, 0}, region[3] = {buffer->image_width, buffer->image_height, 1};
            check(clEnqueueFillImage(queue, memory[b], nan4, origin, region, 0, NULL, NULL),
                  "clEnqueueFillImage");
            if (buffer->data_file != NULL) {
                void *data = read_exactly(folder, buffer->data_file, bytes);
                check(clEnqueueWriteImage(queue, memory[b], CL_TRUE, origin, region, 0, 0, data,
                                          0, NULL, NULL),
                      "clEnqueueWriteImage (constant)");
                free(data);
            }
            continue;
        }
        if (buffer->storage != b) { /* an earlier buffer's memory, its life over */
            memory[b] = memory[buffer->storage];
            check(clRetainMemObject(memory[b]), "clRetainMemObject");
            continue;
        }
        memory[b] = clCreateBuffer(context, CL_MEM_READ_WRITE, buffer->storage_bytes, NULL, &status);
        check(status, "clCreateBuffer");
        if (is_float)
            check(clEnqueueFillBuffer(queue, memory[b], nan4, sizeof(float), 0,
                                      buffer->storage_bytes, 0, NULL, NULL),
                  "clEnqueueFillBuffer");
        if (buffer->data_file != NULL) {
            void *data = read_exactly(folder, buffer->data_file, bytes);
            check(clEnqueueWriteBuffer(queue, memory[b], CL_TRUE, 0, bytes, data, 0, NULL, NULL),
                  "clEnqueueWriteBuffer (constant)");
            free(data);
        }
    }

    cl_kernel kernels[LAYTUNE_MODEL_LAUNCH_COUNT];
    for (int k = 0; k < LAYTUNE_MODEL_LAUNCH_COUNT; k++) {
        const laytune_model_launch *launch = &LAYTUNE_MODEL_LAUNCHES[k];
        kernels[k] = clCreateKernel(programs[launch->program], launch->kernel, &status);
        check(status, launch->kernel);
        for (unsigned a = 0; a < launch->n_args; a++)
            check(clSetKernelArg(kernels[k], a, sizeof(cl_mem), &memory[launch->args[a]]),
                  "clSetKernelArg");
    }

    void *inputs[LAYTUNE_MODEL_INPUT_COUNT];
    for (int i = 0; i < LAYTUNE_MODEL_INPUT_COUNT; i++) {
        const laytune_model_input *input = &LAYTUNE_MODEL_INPUTS[i];
        size_t bytes = LAYTUNE_MODEL_BUFFERS[input->buffer].item_size * input->elements;
        if (input->data_file == NULL) {
            fprintf(stderr, "input %s has no data: export with --reference\n", input->name);
            return 2;
        }
        inputs[i] = read_exactly(folder, input->data_file, bytes);
    }
    upload_inputs(queue, memory, inputs);
    enqueue_launches(queue, kernels);
    check(clFinish(queue), "clFinish");

    int failed = 0;
    for (int o = 0; o < LAYTUNE_MODEL_OUTPUT_COUNT; o++) {
        const laytune_model_output *output = &LAYTUNE_MODEL_OUTPUTS[o];
        const laytune_model_buffer *buffer = &LAYTUNE_MODEL_BUFFERS[output->buffer];
        failed |= check_output(queue, memory[output->buffer], output->name, buffer->dtype,
                               output->elements, folder, output->reference_file, output->rtol,
                               output->atol);
    }

    float *scratch[LAYTUNE_MODEL_OUTPUT_COUNT];
    for (int o = 0; o < LAYTUNE_MODEL_OUTPUT_COUNT; o++)
        scratch[o] = malloc(LAYTUNE_MODEL_OUTPUTS[o].elements * sizeof(float));
    if (repeats > 0) { /* inputs up, every launch, outputs back: what one inference costs */
        double *times = malloc((size_t)repeats * sizeof(double));
        for (int r = 0; r < repeats; r++) {
            double start = seconds();
            infer(queue, memory, kernels, inputs, scratch);
            times[r] = seconds() - start;
        }
        qsort(times, (size_t)repeats, sizeof(double), by_value);
        printf("%s: %d launches, median %.3f ms, min %.3f ms over %d runs\n", LAYTUNE_MODEL_NAME,
               LAYTUNE_MODEL_LAUNCH_COUNT, 1e3 * times[repeats / 2], 1e3 * times[0], repeats);
        free(times);
    }
    if (serve) { /* a caller times runs its own way: one per line it writes */
        char line[64];
        fflush(stdout);
        while (!failed && fgets(line, sizeof line, stdin) != NULL) {
            infer(queue, memory, kernels, inputs, scratch);
            fputs("ran\n", stdout);
            fflush(stdout);
        }
    }
    for (int o = 0; o < LAYTUNE_MODEL_OUTPUT_COUNT; o++) free(scratch[o]);

    for (int i = 0; i < LAYTUNE_MODEL_INPUT_COUNT; i++) free(inputs[i]);
    for (int k = 0; k < LAYTUNE_MODEL_LAUNCH_COUNT; k++) clReleaseKernel(kernels[k]);
    for (int b = 0; b < LAYTUNE_MODEL_BUFFER_COUNT; b++) clReleaseMemObject(memory[b]);
    for (int p = 0; p < LAYTUNE_MODEL_PROGRAM_COUNT; p++) clReleaseProgram(programs[p]);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    return failed;
}
