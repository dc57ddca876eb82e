/* Run a kernel exported by `laytune export --reference` with the OpenCL C API
 * and check its outputs against laytune's numpy reference.
 *
 * Build it with the header that `laytune export` wrote for the kernel:
 *
 *     cc -std=c99 -O2 -include build/matmul_256x256x256_81d5c061.h \
 *         examples/opencl_host/host.c -lOpenCL -o host
 *     ./host build/
 *
 * The header describes the program: its source file, build options, every
 * buffer (logical and physical sizes, global buffer or RGBA float image,
 * role, reference data file) and every launch in order (pack, compute,
 * unpack: kernel name, arguments, global and local sizes). This program
 * allocates each buffer twice, dense in its logical shape and in its
 * physical layout (once where the header marks it aliased: its physical
 * storage is its logical array, and no launch packs or unpacks it), uploads
 * the inputs into the logical buffers, runs the launches, reads the outputs
 * back from the logical buffers and compares them with the reference: |out - ref| <= atol * max(1, max |ref|) +
 * rtol * |ref|, the check laytune itself applies. Exit status 0: every
 * output matches; 1: an output differs; 2: OpenCL or file trouble.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef LAYTUNE_BUFFERS
#error "include the header laytune export wrote: cc -include build/<name>.h host.c -lOpenCL"
#endif

static void check(cl_int status, const char *what) {
    if (status != CL_SUCCESS) {
        fprintf(stderr, "%s failed: OpenCL error %d\n", what, (int)status);
        exit(2);
    }
}

static void *read_file(const char *folder, const char *name, size_t *size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *data = malloc((size_t)length + 1);
    if (data == NULL || fread(data, 1, (size_t)length, file) != (size_t)length) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    data[length] = '\0';
    fclose(file);
    *size = (size_t)length;
    return data;
}

/* What an ICD loader returns when it finds no OpenCL runtime (cl_khr_icd). */
#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

/* The ICD loader found no runtime: say where it looked and how to point it
 * at the runtimes pip installed for laytune, which it cannot find alone. */
static void no_platform(cl_int status) {
    const char *vendors = getenv("OCL_ICD_VENDORS");
    int set = vendors != NULL && vendors[0] != '\0';
    fprintf(stderr, "no OpenCL platform found (clGetPlatformIDs: OpenCL error %d%s): ", (int)status,
            status == CL_PLATFORM_NOT_FOUND_KHR ? ", CL_PLATFORM_NOT_FOUND_KHR" : "");
    if (set)
        fprintf(stderr, "the ICD loader found no runtime it can load in OCL_ICD_VENDORS=%s\n",
                vendors);
    else
        fprintf(stderr, "OCL_ICD_VENDORS is not set, and the ICD loader found no runtime in "
                        "/etc/OpenCL/vendors, where the runtimes pip installed are not listed\n");
    fprintf(stderr,
            "to run on the runtime laytune tuned on, point OCL_ICD_VENDORS at the vendors folder "
            "laytune writes (with the Python environment laytune is installed in), then run this "
            "program again:\n"
            "  %sexport OCL_ICD_VENDORS=\"$(python -c 'import os; from laytune.runners import "
            "register_opencl_runtimes as r; r(); print(os.environ.get(\"OCL_ICD_VENDORS\", \"\"))')\"\n"
            "(examples/opencl_host/README.md)\n",
            set ? "unset OCL_ICD_VENDORS; " : "");
    exit(2);
}

/* The device laytune tuned for ("<device> (<platform>)"), else the first one. */
static cl_device_id pick_device(void) {
    cl_platform_id platforms[16];
    cl_uint n_platforms = 0;
    cl_int status = clGetPlatformIDs(16, platforms, &n_platforms);
    if (status == CL_PLATFORM_NOT_FOUND_KHR || (status == CL_SUCCESS && n_platforms == 0))
        no_platform(status);
    check(status, "clGetPlatformIDs");
    cl_device_id first = NULL;
    for (cl_uint p = 0; p < n_platforms; p++) {
        cl_device_id devices[16];
        cl_uint n_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices, &n_devices) != CL_SUCCESS)
            continue;
        char platform[256] = "", device[256] = "", label[600];
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof platform, platform, NULL);
        for (cl_uint d = 0; d < n_devices; d++) {
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof device, device, NULL);
            snprintf(label, sizeof label, "%s (%s)", device, platform);
            if (first == NULL) first = devices[d];
            if (strcmp(label, LAYTUNE_DEVICE_NAME) == 0) return devices[d];
        }
    }
    if (first == NULL) {
        fprintf(stderr, "no OpenCL device (is OCL_ICD_VENDORS set? see the README)\n");
        exit(2);
    }
    fprintf(stderr, "note: %s not found; running on the first device\n", LAYTUNE_DEVICE_NAME);
    return first;
}

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : ".";
    cl_int status;
    cl_device_id device = pick_device();
    cl_context context = clCreateContext(NULL, 1, &device, NULL, NULL, &status);
    check(status, "clCreateContext");
    cl_command_queue queue = clCreateCommandQueue(context, device, 0, &status);
    check(status, "clCreateCommandQueue");

    size_t source_size;
    const char *source = read_file(folder, LAYTUNE_SOURCE_FILE, &source_size);
    cl_program program = clCreateProgramWithSource(context, 1, &source, &source_size, &status);
    check(status, "clCreateProgramWithSource");
    if (clBuildProgram(program, 1, &device, LAYTUNE_BUILD_OPTIONS, NULL, NULL) != CL_SUCCESS) {
        char log[16384] = "";
        clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fprintf(stderr, "build failed:\n%s\n", log);
        return 2;
    }

    /* each buffer twice: dense in its logical shape, and in its physical layout;
     * an aliased buffer once, its logical array being its physical storage */
    cl_mem logical[LAYTUNE_BUFFER_COUNT], physical[LAYTUNE_BUFFER_COUNT];
    for (int b = 0; b < LAYTUNE_BUFFER_COUNT; b++) {
        const laytune_buffer *buffer = &LAYTUNE_BUFFERS[b];
        size_t bytes = buffer->logical_elements * buffer->item_size;
        logical[b] = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &status);
        check(status, "clCreateBuffer (logical)");
        if (buffer->aliased) {
            physical[b] = logical[b];
        } else if (buffer->memory == LAYTUNE_IMAGE2D) {
            cl_image_format rgba = {CL_RGBA, CL_FLOAT};
            cl_image_desc desc;
            memset(&desc, 0, sizeof desc);
            desc.image_type = CL_MEM_OBJECT_IMAGE2D;
            desc.image_width = buffer->image_width;
            desc.image_height = buffer->image_height;
            physical[b] = clCreateImage(context, CL_MEM_READ_WRITE, &rgba, &desc, NULL, &status);
        } else {
            physical[b] = clCreateBuffer(context, CL_MEM_READ_WRITE,
                                         buffer->physical_elements * buffer->item_size, NULL, &status);
        }
        check(status, "creating a physical buffer");
        if (buffer->role != LAYTUNE_OUTPUT) {
            size_t size;
            void *data = read_file(folder, buffer->data_file, &size);
            if (size != bytes) {
                fprintf(stderr, "%s holds %zu bytes, expected %zu\n", buffer->data_file, size, bytes);
                return 2;
            }
            check(clEnqueueWriteBuffer(queue, logical[b], CL_TRUE, 0, bytes, data, 0, NULL, NULL),
                  "clEnqueueWriteBuffer");
            free(data);
        }
    }

    for (int k = 0; k < LAYTUNE_LAUNCH_COUNT; k++) {
        const laytune_launch *launch = &LAYTUNE_LAUNCHES[k];
        cl_kernel kernel = clCreateKernel(program, launch->kernel, &status);
        check(status, launch->kernel);
        for (unsigned a = 0; a < launch->n_args; a++) {
            const laytune_arg *arg = &launch->args[a];
            cl_mem *memory = arg->view == LAYTUNE_LOGICAL ? &logical[arg->buffer] : &physical[arg->buffer];
            check(clSetKernelArg(kernel, a, sizeof(cl_mem), memory), "clSetKernelArg");
        }
        const size_t *local = launch->local_size[0] ? launch->local_size : NULL;
        check(clEnqueueNDRangeKernel(queue, kernel, launch->dims, NULL, launch->global_size, local,
                                     0, NULL, NULL),
              launch->kernel);
        clReleaseKernel(kernel);
    }
    check(clFinish(queue), "clFinish");

    int failed = 0;
    for (int b = 0; b < LAYTUNE_BUFFER_COUNT; b++) {
        const laytune_buffer *buffer = &LAYTUNE_BUFFERS[b];
        if (buffer->role == LAYTUNE_INPUT) continue;
        if (strcmp(buffer->dtype, "float32") != 0) {
            fprintf(stderr, "%s: this example compares float32 outputs only, not %s\n",
                    buffer->name, buffer->dtype);
            return 2;
        }
        size_t n = buffer->logical_elements, size;
        float *out = malloc(n * sizeof(float));
        float *want = read_file(folder, buffer->reference_file, &size);
        if (out == NULL || size != n * sizeof(float)) {
            fprintf(stderr, "%s: reference of the wrong size\n", buffer->name);
            return 2;
        }
        check(clEnqueueReadBuffer(queue, logical[b], CL_TRUE, 0, n * sizeof(float), out, 0, NULL,
                                  NULL),
              "clEnqueueReadBuffer");
        double scale = 1.0, worst = 0.0;
        for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++) {
            double error = fabs((double)out[i] - want[i]);
            worst = isnan(error) ? INFINITY : fmax(worst, error);
            if (!(error <= buffer->atol * scale + buffer->rtol * fabs(want[i]))) wrong++;
        }
        printf("%s: %zu elements, max abs error %.3g, %s\n", buffer->name, n, worst,
               wrong ? "DIFFERS" : "matches the reference");
        failed |= wrong != 0;
        free(out);
        free(want);
    }
    for (int b = 0; b < LAYTUNE_BUFFER_COUNT; b++) {
        clReleaseMemObject(logical[b]);
        if (physical[b] != logical[b]) clReleaseMemObject(physical[b]);
    }
    clReleaseProgram(program);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    return failed;
}
