import { realTarget } from '../helpers/kube-target.ts';
import { danmScenarios } from './danm-scenarios.ts';

danmScenarios('real kube-apiserver', realTarget);
